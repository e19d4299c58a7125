"""
A native topic subscriber as a process of its own, for the end-to-end
tests of topics from other protocols (STOMP's, MQTT's): it subscribes
mesh-wide with the client library, says so, and prints what it gets.
"""

import sys
import textwrap

from support.routers import ClientProcess

#: A native subscriber (the client API's subscribe_topic, mesh-wide): says
#: "subscribed" once the router confirmed, then prints each publication's
#: topic and body, and exits after COUNT.
NATIVE_TOPIC_SUBSCRIBER = textwrap.dedent("""
    import sys
    from twisted.internet import defer, task
    from meshroute.client import connect

    async def main(reactor, endpoint, pattern, count):
        client = await connect(reactor, endpoint)
        done, got = defer.Deferred(), []

        def on_message(message):
            print(message.topic, message.body.decode(), flush=True)
            message.ack()
            got.append(message)
            if len(got) == count:
                done.callback(None)

        await client.subscribe_topic(pattern, on_message, mesh_wide=True)
        print("subscribed", flush=True)
        await done
        await client.close()

    task.react(lambda reactor: defer.ensureDeferred(
        main(reactor, sys.argv[1], sys.argv[2], int(sys.argv[3]))))
""")


def native_topic_subscriber(mesh, spec, pattern: str, count: int) -> ClientProcess:
    """
    Start L{NATIVE_TOPIC_SUBSCRIBER} against C{spec}'s client listener
    (a process of C{mesh}'s, ended with it).
    """
    native = ClientProcess("native-subscriber", [spec.client_endpoint, pattern, str(count)],
                           mesh.directory / "clients",
                           program=[sys.executable, "-c", NATIVE_TOPIC_SUBSCRIBER])
    mesh.clients.append(native)
    return native
