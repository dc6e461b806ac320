"""A minimal Prometheus text endpoint on 127.0.0.1, served by trio."""

import re

import trio


def render(metrics: dict[str, float]) -> bytes:
    lines = []
    for name, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        metric = "efs_" + re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower() if not name.startswith("fusetrace") else name
        lines.append(f"# TYPE {metric} gauge\n{metric} {value}")
    return ("\n".join(lines) + "\n").encode()


async def serve(port: int, metrics, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Answer every HTTP request on 127.0.0.1:port with metrics() in Prometheus text form."""
    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    task_status.started()

    async def answer(stream):
        async with stream:
            with trio.move_on_after(5):
                request = b""
                while b"\r\n\r\n" not in request and len(request) < 8192:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        return
                    request += chunk
                body = render(metrics())
                head = (f"HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n").encode()
                await stream.send_all(head + body)

    await trio.serve_listeners(answer, listeners)
