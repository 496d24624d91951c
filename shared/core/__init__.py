"""The pure search core: events in, commands out. No Redis, no asyncio, no clock reads."""
