"""Where server programs come from: the cache, Debian's archive, the npm registry, verified tarballs."""
