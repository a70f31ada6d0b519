"""Kafka adapter: the archive's journal format, producers, consumers and topics."""
