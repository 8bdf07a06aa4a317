"""The discrete-event cluster simulator."""
