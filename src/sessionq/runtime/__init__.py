"""The runtime boundary: the `Substrate` interface (base) and its implementations (simulator)."""
