"""
A trouble met again at each attempt (a full disk at each connection of a
backup, a free-space reading that fails every 100 ms) is said in the log
once when it starts and once when it is over, not at each attempt: a line
per attempt buries what an operator needs to read.
"""

from twisted.logger import Logger


class SaidOnce:
    """
    One recurring trouble's two log lines.  The lines go to the caller's
    logger, so they carry its module's namespace.

    @ivar said: the trouble was said and is not over yet.
    """

    def __init__(self, log: Logger) -> None:
        self._log = log
        self.said = False

    def trouble(self, format: str, **fields) -> None:
        """
        Say C{format} as a warning, unless the trouble was said already.
        """
        if not self.said:
            self.said = True
            self._log.warn(format, **fields)

    def over(self, format: str | None = None, **fields) -> None:
        """
        The trouble is over: say C{format} (if given) when it had been said.
        """
        if self.said:
            self.said = False
            if format is not None:
                self._log.info(format, **fields)
