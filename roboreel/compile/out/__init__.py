"""The OUT folder: its compile record, its file locks, atomic writes and tars, an update's transition."""
