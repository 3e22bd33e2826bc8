"""Test and benchmark helpers that ship with roboreel (a local HTTP server standing in for a bucket or the Hub)."""
