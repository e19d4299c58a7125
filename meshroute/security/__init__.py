"""
Client security: who a client is (users and their SCRAM credentials, or
a TLS client certificate) and what it may do (send to which addresses,
consume from which local queues, publish to and subscribe to which
topics).
"""
