"""
HA instances hosted by another router's process (C{[[ha.colocated]]},
docs/ha.md "Colocated backups"), for the process tests: L{colocate}
writes the entries into the host's file, L{hosted_process} watches a
hosted instance through its own admin endpoint, event log and store,
and signals it through its host's process::

    a_primary, a_backup = mesh.pair("router-a", [witness])
    b_primary, b_backup = mesh.pair("router-b", [witness])
    colocate(a_primary, b_backup)
    one = mesh.spawn(a_primary)          # router-a's primary, router-b's backup
    b_backup_process = hosted_process(one, b_backup)
"""

import os

from support.routers import RouterProcess, RouterSpec


def colocate(host: RouterSpec, *hosted: RouterSpec) -> None:
    """
    Make C{host}'s process run the instances of C{hosted} beside its
    router: one C{[[ha.colocated]]} entry each, naming its file relative
    to C{host}'s, as an operator writes it.
    """
    host.arrays["ha.colocated"] = [
        {"config": os.path.relpath(spec.config_path, host.directory)} for spec in hosted]
    host.write()


def hosted_process(host: RouterProcess, spec: RouterSpec) -> RouterProcess:
    """
    The instance of C{spec} that C{host}'s process runs: its admin API,
    event log and store are its own; its process, its signals and its
    twistd log are C{host}'s.
    """
    return RouterProcess(spec, host.popen)
