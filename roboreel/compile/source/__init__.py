"""Reading the source: frame-exact span decode, read-ahead, file checksums, fingerprints, the --fps grid."""
