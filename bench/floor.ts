/**
 * The HTTP floor: what one JSON request/response round trip over loopback costs on this machine,
 * with nothing behind it. A bare node:http server in its own process reads the body, parses it and
 * answers a JSON body of the size of the store's call_tool answer; the same load generator as the
 * call cells drives it. No gateway that takes calls over HTTP can go faster than this, so it bounds
 * the "fraction of the direct throughput" targets where the direct call never leaves the process
 * (stdio) or costs less than an HTTP round trip. `runIdleFloor` does the same for the idle target:
 * a bare client sending requests at the rate of the store's health checks.
 */
import { cpuSeconds, freePort, spawnChild, stopChild, until, type Child } from "./procs.js"
import { closedLoop, HttpClient, type RunResult } from "./load.js"

export interface FloorCell extends RunResult {
  readonly concurrency: number
  /** CPU time of the bare server per call (us). */
  readonly cpuUsPerCall: number
}

const SERVER = `
const http = require("node:http");
const server = http.createServer((req, res) => {
  let body = "";
  req.setEncoding("utf8");
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    const call = JSON.parse(body);
    const text = call.args.text;
    const answer = JSON.stringify({
      success: true, message: "Tool 'echo' called", result: text, content: [{ type: "text", text }],
      structured_content: null, is_error: false, tool_name: call.tool_name, original_name: "echo",
      service_name: call.service_name, duration_ms: 0.5, trace_id: "00000000-0000-0000-0000-000000000000"
    });
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(answer) });
    res.end(answer);
  });
});
server.listen(Number(process.argv[1]), "127.0.0.1");
`

/** Starts the bare server on a free port; resolves once it answers. */
const startFloorServer = async (name: string): Promise<{ readonly child: Child; readonly port: number }> => {
  const port = await freePort()
  const child = spawnChild(name, process.execPath, ["-e", SERVER, String(port)])
  const http = new HttpClient(`http://127.0.0.1:${port}`, 1)
  try {
    await until(name, async () => (await http.post("/", { tool_name: "echo", service_name: "x", args: { text: "up" } }, 1_000)).status === 200, 10_000, 20)
  } catch (e) {
    await stopChild(child)
    throw e
  } finally {
    http.close()
  }
  return { child, port }
}

/** Runs the floor at each concurrency. */
export const runFloor = async (options: {
  readonly concurrencies: ReadonlyArray<number>
  readonly calls: number
  readonly warmup: number
  readonly maxSeconds: number
}): Promise<ReadonlyArray<FloorCell>> => {
  const { child, port } = await startFloorServer("HTTP floor server")
  const http = new HttpClient(`http://127.0.0.1:${port}`, Math.max(...options.concurrencies))
  try {
    const cells: Array<FloorCell> = []
    for (const concurrency of options.concurrencies) {
      const call = async (i: number) => {
        const res = await http.post("/", { tool_name: "echo", service_name: "bench-http", args: { text: `floor-${i}` } })
        if (res.status !== 200) throw new Error(`HTTP ${res.status}`)
      }
      await closedLoop(call, { concurrency, calls: 0, warmup: options.warmup, maxSeconds: options.maxSeconds })
      const before = cpuSeconds(child.pid)
      const run = await closedLoop(call, { concurrency, calls: options.calls, warmup: 0, maxSeconds: options.maxSeconds })
      cells.push({ ...run, concurrency, cpuUsPerCall: ((cpuSeconds(child.pid) - before) * 1e6) / Math.max(1, run.count) })
    }
    return cells
  } finally {
    http.close()
    await stopChild(child)
  }
}

/** A bare client that POSTs `rate` small JSON requests per second, spread evenly, over keep-alive sockets. */
const CLIENT = `
const http = require("node:http");
const [port, rate] = [Number(process.argv[1]), Number(process.argv[2])];
const agent = new http.Agent({ keepAlive: true });
const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" });
setInterval(() => {
  const req = http.request({ host: "127.0.0.1", port, method: "POST", path: "/", agent,
    headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) } }, (res) => res.resume());
  req.on("error", () => {});
  req.end(body);
}, 1000 / rate);
`

/**
 * The idle floor: the CPU (percent of one core, from /proc) of a bare node:http client sending
 * `ratePerSecond` requests per second to the bare server, each answered: what the store's health
 * checks cost at the least, before any MCP, actor or monitoring work.
 */
export const runIdleFloor = async (options: { readonly ratePerSecond: number; readonly seconds: number }): Promise<number> => {
  const { child: server, port } = await startFloorServer("HTTP floor server (idle)")
  let client: ReturnType<typeof spawnChild> | undefined
  try {
    client = spawnChild("HTTP floor client (idle)", process.execPath, ["-e", CLIENT, String(port), String(options.ratePerSecond)])
    // Past its start-up, then measured.
    await new Promise((r) => setTimeout(r, 2_000))
    const before = cpuSeconds(client.pid)
    const t0 = performance.now()
    await new Promise((r) => setTimeout(r, options.seconds * 1000))
    return ((cpuSeconds(client.pid) - before) / ((performance.now() - t0) / 1000)) * 100
  } finally {
    if (client) await stopChild(client)
    await stopChild(server)
  }
}
