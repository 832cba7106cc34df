"""The ZeroMQ patterns, each assembled from the kernel's actors."""
