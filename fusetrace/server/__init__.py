"""The server: FUSE handlers, the inode table, worker threads, the inline policy, the system
calls they make, and the mount's control socket, run state and lifecycle."""
