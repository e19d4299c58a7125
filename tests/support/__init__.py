"""
What the tests share: fakes, fixtures, harnesses and the scripts some
tests run as processes.  Every test folder imports it as C{support}
(setup.cfg puts tests/ on the path): C{from support.routers import mesh}.

Nothing here is collected as a test.
"""
