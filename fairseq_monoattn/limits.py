"""One constant for "no length limit": nothing in this plugin depends on a maximum length, and
fairseq's own defaults (1024 positions) would silently filter or cut long test inputs."""

NO_LENGTH_LIMIT = 1_000_000
