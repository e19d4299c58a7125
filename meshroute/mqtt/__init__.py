"""
MQTT 3.1.1 and 5.0 clients on the mesh (docs/mqtt.md).
"""
