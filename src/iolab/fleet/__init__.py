"""Running fio on many hosts at once through fio's own client/server mode (docs/fleet.md)."""
