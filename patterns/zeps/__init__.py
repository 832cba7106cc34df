"""ZEPS: journaled publish-subscribe with replay and credit flow control."""
