"""
Which of the engine's acceptance calls a client connection made
(L{recorded_submits}): what the tests of reads of many sends (MQTT
PUBLISHes, STOMP SENDs) check that they became one store call.
"""


def recorded_submits(engine) -> list:
    """
    Record, in order, each C{engine.submit} as C{("submit", address)} and
    each C{engine.submit_many} as C{("submit_many", [address, ...])},
    every call still carried out by C{engine}; the list they go to.
    """
    calls: list = []
    submit, submit_many = engine.submit, engine.submit_many
    # A fake engine's submit_many submits each send: those are not calls
    # of the connection's.
    within_many: list = []

    def recorded_submit(address, *rest, **more):
        if not within_many:
            calls.append(("submit", address))
        return submit(address, *rest, **more)

    def recorded_submit_many(sends):
        calls.append(("submit_many", [send[0] for send in sends]))
        within_many.append(sends)
        try:
            return submit_many(sends)
        finally:
            within_many.pop()

    engine.submit, engine.submit_many = recorded_submit, recorded_submit_many
    return calls
