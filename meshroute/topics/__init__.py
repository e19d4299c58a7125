"""
Topics: publish/subscribe addresses (issue 29, in progress).

Pure rules, no reactor, no store: the names and patterns of topics and
which topics a pattern matches (L{meshroute.topics.patterns}), and the
index a router matches a publication against its subscriptions with
(L{meshroute.topics.index}).  Not wired into the router yet: only the
security policy imports it, to judge topic permissions with its
patterns.
"""
