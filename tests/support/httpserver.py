"""The fault-injecting HTTP server lives in the library (the benchmark uses it too); tests import it from here."""

from roboreel.bench.httpserver import Faults, FaultyServer, Request

__all__ = ["Faults", "FaultyServer", "Request"]
