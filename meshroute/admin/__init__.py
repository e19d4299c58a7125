"""
The admin HTTP API (JSON over twisted.web).
"""
