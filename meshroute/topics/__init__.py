"""
Topics: publish/subscribe addresses (docs/topics.md).

Pure rules, no reactor, no store: the names and patterns of topics and
which topics a pattern matches (L{meshroute.topics.patterns}), the index
a router matches a publication against subscriptions with
(L{meshroute.topics.index}), and interest: a router's own, the table of
others', and a publication's fan-out by next hop
(L{meshroute.topics.interest}).  The router's topic parts
(C{meshroute.router.topic_*}) and the security policy build on them.
"""
