"""The server: the FUSE surface (handlers.py), the one request pipeline it calls
(pipeline.py), open files, inodes, no-follow system calls, worker threads, the inline
policy, and the mount's control socket, run state and life cycle."""
