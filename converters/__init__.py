"""Source adapters: they list what users have and turn each input into examples."""
