/**
 * Tool-call overhead: the fixture's `echo` tool over Streamable HTTP (a bench/fixtures.ts process)
 * and over stdio (test/fixtures/stdio-fixture.ts), called three ways side by side: directly with the
 * MCP SDK client, through the store's `POST /for_store/call_tool`, and through mcp-hub's
 * `POST /api/servers/tools`. Each cell (transport x concurrency x way) runs a warm-up, then a fixed
 * number of calls with distinct arguments; the three ways of a cell run one after the other, in a
 * rotating order, so background load hits them alike. The store's and mcp-hub's CPU time per call is
 * read from /proc around each cell.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { HttpClient, closedLoop, type RunResult } from "./load.js"
import { cpuSeconds, onCleanup, startHub, startStore, stdioFixtureLaunch, stopChild, trackPid, type StoreProcess } from "./procs.js"

export type Transport = "http" | "stdio"
export type Way = "direct" | "store" | "mcp-hub"
export const WAYS: ReadonlyArray<Way> = ["direct", "store", "mcp-hub"]

export interface Cell extends RunResult {
  readonly transport: Transport
  readonly concurrency: number
  readonly way: Way
  /** CPU time of the middle process (store or mcp-hub) per call, in microseconds; null for direct. */
  readonly cpuUsPerCall: number | null
  /** CPU time of the benchmark process (the load generator, and the SDK client for direct) per call, in microseconds. */
  readonly benchCpuUsPerCall: number
  /** CPU time of the HTTP fixture process per call, in microseconds (HTTP cells only). */
  readonly fixtureCpuUsPerCall: number | null
}

export interface CallsOptions {
  readonly concurrencies: ReadonlyArray<number>
  readonly transports: ReadonlyArray<Transport>
  readonly calls: number
  readonly warmup: number
  readonly maxSeconds: number
  /** The HTTP fixture's process, for its CPU time per call. */
  readonly fixturePid?: number
  readonly log: (line: string) => void
}

/** Service names, identical in the store and in mcp-hub. */
const SERVICE: Record<Transport, string> = { http: "fx-http", stdio: "fx-stdio" }

const echoed = (content: unknown): string | undefined => {
  const first = (content as Array<{ type?: string; text?: string }> | undefined)?.[0]
  return first?.type === "text" ? first.text : undefined
}

/** A way to call `echo` on one transport. */
type Caller = (text: string) => Promise<void>

/** An MCP SDK client connected straight to the fixture. */
export const directClient = async (transport: Transport, httpUrl: string): Promise<{ close: () => Promise<void>; call: Caller }> => {
  const client = new Client({ name: "bench-direct", version: "1.0.0" })
  if (transport === "http") {
    await client.connect(new StreamableHTTPClientTransport(new URL(httpUrl)))
  } else {
    const t = new StdioClientTransport({ ...stdioFixtureLaunch, args: [...stdioFixtureLaunch.args], stderr: "ignore" })
    await client.connect(t)
    if (t.pid !== null) trackPid(t.pid)
  }
  const unregister = onCleanup(() => client.close())
  const close = async () => {
    unregister()
    await client.close()
  }
  const call: Caller = async (text) => {
    const result = await client.callTool({ name: "echo", arguments: { text } })
    if (echoed(result.content) !== text) throw new Error(`direct: unexpected result ${JSON.stringify(result).slice(0, 200)}`)
  }
  return { close, call }
}

const storeCaller = (http: HttpClient, transport: Transport): Caller => async (text) => {
  const res = await http.post("/for_store/call_tool", { tool_name: "echo", service_name: SERVICE[transport], args: { text } })
  const body = res.body as { success?: boolean; result?: unknown } | undefined
  if (res.status !== 200 || body?.success !== true || body.result !== text) {
    throw new Error(`store: HTTP ${res.status} ${JSON.stringify(res.body).slice(0, 200)}`)
  }
}

const hubCaller = (http: HttpClient, transport: Transport): Caller => async (text) => {
  const res = await http.post("/api/servers/tools", { server_name: SERVICE[transport], tool: "echo", arguments: { text } })
  const body = res.body as { result?: { content?: unknown } } | undefined
  if (res.status !== 200 || echoed(body?.result?.content) !== text) {
    throw new Error(`mcp-hub: HTTP ${res.status} ${JSON.stringify(res.body).slice(0, 200)}`)
  }
}

/** Starts the store with both fixture services and waits until both are healthy. */
export const startStoreWithFixtures = async (
  dir: string,
  httpUrl: string,
  options: { nodeArgs?: ReadonlyArray<string>; args?: ReadonlyArray<string>; name?: string; script?: string } = {}
): Promise<StoreProcess> => {
  mkdirSync(dir, { recursive: true })
  const configFile = join(dir, "mcp.json")
  writeFileSync(
    configFile,
    JSON.stringify({ mcpServers: { [SERVICE.http]: { url: httpUrl }, [SERVICE.stdio]: { command: stdioFixtureLaunch.command, args: stdioFixtureLaunch.args } } }, null, 2)
  )
  const store = await startStore(configFile, options)
  const http = new HttpClient(store.url, 4)
  try {
    for (const name of Object.values(SERVICE)) {
      const res = await http.post("/for_store/wait_service", { client_id_or_service_name: name, status: "healthy", timeout: 30 }, 35_000)
      if ((res.body as { data?: { result?: boolean } } | undefined)?.data?.result !== true) throw new Error(`store: ${name} not healthy: ${JSON.stringify(res.body)}`)
    }
  } finally {
    http.close()
  }
  return store
}

/** The store's call path on one transport, for the profile run. */
export const storeCallerFor = storeCaller

/** Runs every cell. The store, mcp-hub and the direct clients started here are released by `close()` (or by `stopAll`). */
export const runCalls = async (dir: string, httpUrl: string, options: CallsOptions): Promise<{ cells: Cell[]; close: () => Promise<void> }> => {
  const store = await startStoreWithFixtures(join(dir), httpUrl)
  const hub = await startHub(join(dir, "mcp-hub"), {
    [SERVICE.http]: { url: httpUrl },
    [SERVICE.stdio]: { command: stdioFixtureLaunch.command, args: stdioFixtureLaunch.args }
  })
  options.log(`  store (pid ${store.child.pid}) and mcp-hub (pid ${hub.child.pid}) connected to both fixtures`)
  const maxC = Math.max(...options.concurrencies)
  const storeHttp = new HttpClient(store.url, maxC)
  const hubHttp = new HttpClient(hub.url, maxC)
  const unregister = onCleanup(() => {
    storeHttp.close()
    hubHttp.close()
  })
  const direct = { http: await directClient("http", httpUrl), stdio: await directClient("stdio", httpUrl) }
  const close = async () => {
    unregister()
    storeHttp.close()
    hubHttp.close()
    await Promise.all([direct.http.close(), direct.stdio.close(), stopChild(store.child), stopChild(hub.child)])
  }
  const callers = (t: Transport): Record<Way, { call: Caller; pid: number | null }> => ({
    direct: { call: direct[t].call, pid: null },
    store: { call: storeCaller(storeHttp, t), pid: store.child.pid },
    "mcp-hub": { call: hubCaller(hubHttp, t), pid: hub.child.pid }
  })

  // A first warm-up of every path (JIT, connection pools), not measured.
  for (const t of options.transports) {
    for (const way of WAYS) {
      const { call } = callers(t)[way]
      await closedLoop((i) => call(`warm-${i}`), { concurrency: 8, calls: 0, warmup: options.warmup * 2, maxSeconds: options.maxSeconds })
    }
  }

  const cells: Cell[] = []
  let rotation = 0
  let serial = 0
  for (const transport of options.transports) {
    for (const concurrency of options.concurrencies) {
      const order = WAYS.map((_, k) => WAYS[(k + rotation) % WAYS.length]!)
      rotation++
      for (const way of order) {
        const { call, pid } = callers(transport)[way]
        const cell = serial++
        const cpuBefore = pid === null ? 0 : cpuSeconds(pid)
        const benchBefore = process.cpuUsage()
        const fixtureBefore = transport === "http" && options.fixturePid !== undefined ? cpuSeconds(options.fixturePid) : 0
        const result = await closedLoop((i) => call(`c${cell}-${i}`), {
          concurrency,
          calls: options.calls,
          warmup: Math.max(options.warmup, concurrency * 2),
          maxSeconds: options.maxSeconds
        })
        // The CPU reading covers warm-up and measured calls alike.
        const total = Math.max(options.warmup, concurrency * 2) + result.count + result.errors
        const cpuUsPerCall = pid === null ? null : ((cpuSeconds(pid) - cpuBefore) * 1e6) / total
        const bench = process.cpuUsage(benchBefore)
        const benchCpuUsPerCall = (bench.user + bench.system) / total
        const fixtureCpuUsPerCall =
          transport === "http" && options.fixturePid !== undefined ? ((cpuSeconds(options.fixturePid) - fixtureBefore) * 1e6) / total : null
        cells.push({ ...result, transport, concurrency, way, cpuUsPerCall, benchCpuUsPerCall, fixtureCpuUsPerCall })
        options.log(
          `  ${transport.padEnd(5)} c=${String(concurrency).padEnd(3)} ${way.padEnd(7)} ${result.rate.toFixed(0).padStart(6)} calls/s  ` +
            `p50 ${result.p50.toFixed(2)} p95 ${result.p95.toFixed(2)} p99 ${result.p99.toFixed(2)} ms` +
            (result.errors > 0 ? `  ${result.errors} errors: ${result.firstError}` : "") +
            (result.cut ? "  (cut by the time limit)" : "")
        )
      }
    }
  }
  return { cells, close }
}
