"""The one cloud contract every provider implements, and the drivers that implement it."""
