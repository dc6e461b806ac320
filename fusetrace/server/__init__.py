"""The server: FUSE handlers (each names its request: fusetrace/request.py), the inode table,
worker threads, the inline policy, the system calls they make, and the mount's control
socket, run state and lifecycle."""
