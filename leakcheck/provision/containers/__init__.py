"""The containers backend: the Docker engine, images, and the poolers' containers."""
