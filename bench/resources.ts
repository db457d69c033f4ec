/**
 * resources/read overhead, beside the tool-call cells: the conformance fixture
 * (test/fixtures/conformance-server.ts, stdio) read three ways side by side: directly with the MCP
 * SDK client's readResource, through the store's `POST /for_store/read_resource`, and through the
 * store's `/mcp` (`resources/read` from an SDK client over Streamable HTTP). Each read names a
 * distinct templated URI (`test://template/<n>/data`); the ways of a concurrency run one after the
 * other in a rotating order, and each cell reports its p50 against the direct one's.
 *
 * `neighbours` (BENCH_READ_NEIGHBOURS alone, default 0) adds that many server-everything (stdio)
 * services to the store's scope, each with its own resources and templates (colliding with each
 * other, so listed under prefixed URIs): how a read fares in a scope of many services.
 *
 *   node --import tsx bench/resources.ts   (alone: BENCH_CALLS, BENCH_WARMUP, BENCH_CONCURRENCY as in run.ts, BENCH_READ_NEIGHBOURS)
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { HttpClient, closedLoop, type RunResult } from "./load.js"
import { ROOT, TSX_IMPORT, buildStore, cpuSeconds, onCleanup, startStore, stopAll, stopChild, trackPid, workFolder } from "./procs.js"

export type ReadWay = "direct" | "store-rest" | "store-mcp"
export const READ_WAYS: ReadonlyArray<ReadWay> = ["direct", "store-rest", "store-mcp"]

export interface ReadCell extends RunResult {
  readonly concurrency: number
  readonly way: ReadWay
  /** p50 over the direct cell's p50 at the same concurrency (1 for direct). */
  readonly ratio: number
  /** CPU time of the store per read, in microseconds; null for direct. */
  readonly cpuUsPerCall: number | null
  /** Other services with resources in the store's scope. */
  readonly neighbours: number
}

const SERVICE = "conf"
const fixtureLaunch = { command: process.execPath, args: [...TSX_IMPORT, join(ROOT, "test", "fixtures", "conformance-server.ts")] }
const everythingLaunch = { command: process.execPath, args: [join(ROOT, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"), "stdio"] }
const uriOf = (text: string) => `test://template/${text}/data`

/** The services of a read cell: the conformance fixture (`conf`, read) and `neighbours` server-everything services. */
export const readServices = (neighbours: number) => {
  const names = [SERVICE, ...Array.from({ length: neighbours }, (_, i) => `everything-${i}`)]
  return { names, mcpServers: Object.fromEntries(names.map((name) => [name, name === SERVICE ? fixtureLaunch : everythingLaunch])) }
}

type Reader = (text: string) => Promise<void>

/** Checks that a read's first content names the id read. */
const check = (way: string, text: string, contents: unknown) => {
  const first = (contents as Array<{ text?: string }> | undefined)?.[0]
  if (typeof first?.text !== "string" || !first.text.includes(text)) throw new Error(`${way}: unexpected contents ${JSON.stringify(contents).slice(0, 200)}`)
}

const sdkReader = async (way: ReadWay, connect: (client: Client) => Promise<void>): Promise<{ read: Reader; close: () => Promise<void> }> => {
  const client = new Client({ name: `bench-${way}`, version: "1.0.0" })
  await connect(client)
  const unregister = onCleanup(() => client.close())
  return {
    read: async (text) => check(way, text, (await client.readResource({ uri: uriOf(text) })).contents),
    close: async () => {
      unregister()
      await client.close()
    }
  }
}

/** Runs every cell; everything started here is stopped before it resolves. */
export const runResourceReads = async (
  dir: string,
  options: { concurrencies: ReadonlyArray<number>; calls: number; warmup: number; maxSeconds: number; neighbours?: number; log: (line: string) => void }
): Promise<ReadCell[]> => {
  mkdirSync(dir, { recursive: true })
  const configFile = join(dir, "mcp.json")
  const neighbours = options.neighbours ?? 0
  const { names, mcpServers } = readServices(neighbours)
  writeFileSync(configFile, JSON.stringify({ mcpServers }, null, 2))
  const store = await startStore(configFile, { name: "store (resources)" })
  const http = new HttpClient(store.url, Math.max(8, ...options.concurrencies))
  const closers: Array<() => Promise<void>> = [async () => http.close(), () => stopChild(store.child)]
  try {
    for (const name of names) {
      const ready = await http.post("/for_store/wait_service", { client_id_or_service_name: name, status: "healthy", timeout: 30 }, 35_000)
      if ((ready.body as { data?: { result?: boolean } } | undefined)?.data?.result !== true) throw new Error(`store: ${name} not healthy: ${JSON.stringify(ready.body)}`)
    }
    const direct = await sdkReader("direct", async (client) => {
      const t = new StdioClientTransport({ ...fixtureLaunch, stderr: "ignore" })
      await client.connect(t)
      if (t.pid !== null) trackPid(t.pid)
    })
    closers.push(direct.close)
    const mcp = await sdkReader("store-mcp", (client) => client.connect(new StreamableHTTPClientTransport(new URL(`${store.url}/mcp`))))
    closers.push(mcp.close)
    const rest: Reader = async (text) => {
      const res = await http.post("/for_store/read_resource", { uri: uriOf(text) })
      if (res.status !== 200) throw new Error(`store-rest: HTTP ${res.status} ${JSON.stringify(res.body).slice(0, 200)}`)
      check("store-rest", text, (res.body as { contents?: unknown }).contents)
    }
    const readers: Record<ReadWay, Reader> = { direct: direct.read, "store-rest": rest, "store-mcp": mcp.read }

    for (const way of READ_WAYS) await closedLoop((i) => readers[way](`warm${i}`), { concurrency: 8, calls: 0, warmup: options.warmup, maxSeconds: options.maxSeconds })
    const cells: ReadCell[] = []
    let rotation = 0
    let serial = 0
    for (const concurrency of options.concurrencies) {
      const order = READ_WAYS.map((_, k) => READ_WAYS[(k + rotation) % READ_WAYS.length]!)
      rotation++
      const runs = new Map<ReadWay, { result: RunResult; cpuUsPerCall: number | null }>()
      for (const way of order) {
        const cell = serial++
        const warmup = Math.max(options.warmup, concurrency * 2)
        const cpuBefore = cpuSeconds(store.child.pid)
        const result = await closedLoop((i) => readers[way](`c${cell}n${i}`), { concurrency, calls: options.calls, warmup, maxSeconds: options.maxSeconds })
        const total = warmup + result.count + result.errors
        runs.set(way, { result, cpuUsPerCall: way === "direct" ? null : ((cpuSeconds(store.child.pid) - cpuBefore) * 1e6) / total })
      }
      const base = runs.get("direct")!.result.p50
      for (const way of READ_WAYS) {
        const { result, cpuUsPerCall } = runs.get(way)!
        const ratio = result.p50 / base
        cells.push({ ...result, concurrency, way, ratio, cpuUsPerCall, neighbours })
        options.log(
          `  read${neighbours > 0 ? ` (+${neighbours} services)` : ""} c=${String(concurrency).padEnd(3)} ${way.padEnd(10)} ${result.rate.toFixed(0).padStart(6)} reads/s  ` +
            `p50 ${result.p50.toFixed(2)} p95 ${result.p95.toFixed(2)} ms  x${ratio.toFixed(2)} of direct` +
            (cpuUsPerCall !== null ? `  store CPU ${cpuUsPerCall.toFixed(0)} us/read` : "") +
            (result.errors > 0 ? `  ${result.errors} errors: ${result.firstError}` : "")
        )
      }
    }
    return cells
  } finally {
    for (const close of closers.reverse()) await close().catch(() => undefined)
  }
}

// Alone: builds the bundle and runs the cells.
if (process.argv[1] !== undefined && import.meta.url.endsWith(process.argv[1].split("/").pop()!) && process.argv[1].endsWith("resources.ts")) {
  const numbers = (v: string | undefined, d: ReadonlyArray<number>) => (v === undefined ? d : v.split(",").map(Number))
  buildStore()
  try {
    await runResourceReads(workFolder("mcp-store-bench-resources-"), {
      concurrencies: numbers(process.env.BENCH_CONCURRENCY, [1, 8, 32]),
      calls: Number(process.env.BENCH_CALLS ?? 2000),
      warmup: Number(process.env.BENCH_WARMUP ?? 300),
      maxSeconds: 60,
      neighbours: Number(process.env.BENCH_READ_NEIGHBOURS ?? 0),
      log: (line) => console.log(line)
    })
  } finally {
    await stopAll()
  }
}
