"""
C{meshroute user}: manage a users file (C{[security] users-file},
docs/security.md): add, remove, list.
"""

import getpass
import os
import sys

from twisted.python import usage

from meshroute.cli.command_options import CommandOptions
from meshroute.errors import ConfigError
from meshroute.security.credentials import derive
from meshroute.security.users import USER_NAME, read_users, write_users


class _UsersFileOptions(CommandOptions):
    """
    The C{--file} every C{meshroute user} command needs.
    """

    optParameters = [["file", "f", None, "The users file (created by the first add)."]]

    def check_file(self) -> None:
        if not self["file"]:
            raise usage.UsageError("--file FILE is required")


class UserAddOptions(_UsersFileOptions):
    synopsis = "--file FILE [--password-stdin] [--replace] NAME"
    longdesc = ("Add user NAME to the users file, with a password prompted for twice (or "
                "read from the first line of standard input with --password-stdin; never "
                "from the command line).  The file keeps SCRAM-SHA-256 credentials, never "
                "the password, and is written with mode 0600.  A running router reads it "
                "again on SIGHUP.")
    optFlags = [["password-stdin", None, "Read the password from standard input."],
                ["replace", None, "Change the password of a user the file already holds."]]

    def parseArgs(self, name: str) -> None:
        self["name"] = name

    def postOptions(self) -> None:
        self.check_file()
        if not USER_NAME.fullmatch(self["name"]):
            raise usage.UsageError(f"{self['name']!r} is not a user name "
                                   "(1 to 64 of A-Z a-z 0-9 . _ -)")


class UserRemoveOptions(_UsersFileOptions):
    synopsis = "--file FILE NAME"
    longdesc = ("Remove user NAME from the users file.  A running router closes the user's "
                "connections when it reads the file again (SIGHUP).")

    def parseArgs(self, name: str) -> None:
        self["name"] = name

    def postOptions(self) -> None:
        self.check_file()


class UserListOptions(_UsersFileOptions):
    synopsis = "--file FILE"
    longdesc = "List the names of the users file's users, one a line (never their hashes)."

    def postOptions(self) -> None:
        self.check_file()


class UserOptions(CommandOptions):
    synopsis = "add|remove|list --file FILE [options]"
    longdesc = "Manage a users file ([security] users-file, docs/security.md)."
    subCommands = [
        ["add", None, UserAddOptions, "Add a user, or change its password with --replace."],
        ["remove", None, UserRemoveOptions, "Remove a user."],
        ["list", None, UserListOptions, "List the users' names."],
    ]

    def postOptions(self) -> None:
        if self.subCommand is None:
            raise usage.UsageError("a user command is required: add, remove or list")


def _users_or_none(path: str, err) -> dict | None:
    """
    The users of C{path} (none if it does not exist yet), or None after
    reporting why it cannot be used.
    """
    if not os.path.exists(path):
        return {}
    try:
        return read_users(path)
    except ConfigError as e:
        err.write(f"meshroute: {e}\n")
        return None


def _read_password(options, err, stdin) -> str | None:
    """
    The new password: the first line of C{stdin} with C{--password-stdin},
    else prompted for twice; None after reporting an empty or mismatched
    one.
    """
    if options["password-stdin"]:
        password = stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"password for {options['name']}: ")
        if getpass.getpass("again: ") != password:
            err.write("meshroute: the passwords differ; nothing changed\n")
            return None
    if not password:
        err.write("meshroute: the password is empty; nothing changed\n")
        return None
    return password


def user_add(options, out, err=None, stdin=None) -> int:
    err, stdin = err or sys.stderr, stdin or sys.stdin
    path, name = options["file"], options["name"]
    users = _users_or_none(path, err)
    if users is None:
        return 1
    if name in users and not options["replace"]:
        err.write(f"meshroute: {path} already holds user {name}; "
                  "--replace changes its password\n")
        return 1
    password = _read_password(options, err, stdin)
    if password is None:
        return 1
    existed = name in users
    users[name] = derive(password)
    write_users(path, users)
    out.write(f"{'changed the password of' if existed else 'added'} user {name} in {path}\n")
    return 0


def user_remove(options, out, err=None) -> int:
    err = err or sys.stderr
    path, name = options["file"], options["name"]
    users = _users_or_none(path, err)
    if users is None:
        return 1
    if name not in users:
        err.write(f"meshroute: {path} holds no user {name}\n")
        return 1
    del users[name]
    write_users(path, users)
    out.write(f"removed user {name} from {path}\n")
    return 0


def user_list(options, out, err=None) -> int:
    err = err or sys.stderr
    path = options["file"]
    if not os.path.exists(path):
        err.write(f"meshroute: {path} does not exist\n")
        return 1
    users = _users_or_none(path, err)
    if users is None:
        return 1
    for name in users:
        out.write(f"{name}\n")
    return 0


def user(options, out) -> int:
    return USER_COMMANDS[options.subCommand](options.subOptions, out)


USER_COMMANDS = {"add": user_add, "remove": user_remove, "list": user_list}
