"""
twistd plugin: C{twistd meshroute --config FILE} starts one router.
"""

from twisted.application.service import ServiceMaker

meshroute = ServiceMaker(
    "meshroute",
    "meshroute.tap",
    "A meshroute router: routing links, admin API, event log.",
    "meshroute",
)
