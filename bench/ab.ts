/**
 * A/B comparison of two builds of the store on a shared, loaded machine. Absolute CPU figures move
 * by 20 to 70 % with the load of other processes, so a change is measured against the build before
 * it side by side: both stores run at once, their calls are interleaved in short rounds (A then B,
 * B then A, alternating), and each store's CPU time is summed from /proc over its own rounds. An
 * A/A run (the same bundle twice) agrees within 2 to 3 %.
 *
 *   npx tsx bench/ab.ts build /tmp/ab/before          # the current sources -> /tmp/ab/before/dist/mcp-store.mjs
 *   (change the sources)
 *   npx tsx bench/ab.ts build /tmp/ab/after
 *   npx tsx bench/ab.ts calls /tmp/ab/before /tmp/ab/after [--transport stdio] [--c 32] [--rounds 24] [--calls 400] [--b-traced]
 *   npx tsx bench/ab.ts reads /tmp/ab/before /tmp/ab/after [--neighbours 10] [--c 1] [--rounds 24] [--calls 400]
 *   npx tsx bench/ab.ts idle /tmp/ab/before /tmp/ab/after [--services 1000] [--windows 3] [--seconds 30]
 *   npx tsx bench/ab.ts eras /tmp/ab/before /tmp/ab/after [--rounds 10] [--calls 400] [--ways v1,v2,old,modern,oldio,modernio] [--concurrencies 1,32] [--within]
 *
 * `calls`: both stores on the same fixtures (one HTTP fixture process, a stdio fixture each), c
 * callers, `rounds` rounds of `calls` calls per store; `--b-traced`: store B exports its spans
 * (`--otlp-endpoint`) to an OTLP/HTTP sink in this process that reads each request and answers 200
 * (the same build on both sides measures the cost of tracing on). `reads`: REST read_resource of templated URIs
 * from the conformance fixture beside `neighbours` server-everything services (bench/resources.ts's
 * cell). `idle`: both stores with the same services
 * (agents of 10 services on Streamable HTTP fixtures, health checks every 30 s) at the same time;
 * after one settling interval, CPU per store over `windows` windows of `seconds`. `eras`: bench/eras.ts's
 * cells (/mcp from a 2025 and a 2026-07-28 client, REST to a 2025 and a 2026-07-28 upstream over
 * Streamable HTTP and stdio) at c=1 and c=32, each cell interleaved A/B, with each store's ratios of
 * the modern path to the 2025 one, and the HTTP fixtures' own CPU per call; `--ways` picks cells
 * (v1, v2: /mcp from a 2025 and a 2026-07-28 client to the 2025 HTTP upstream, v1io, v2io: to the
 * 2025 stdio upstream; old, modern, oldio, modernio: REST to each upstream; rawio, rawmodernio: REST to
 * bench/raw-upstream.ts over stdio in each era, a responder that costs both eras the same and little,
 * so their ratio is the store's own), and `--within` also interleaves each pair of eras within each
 * store (their ratio then carries no drift between cells); `--per-round` prints each round's µs per
 * call of both sides. The stdio upstreams' own CPU per call
 * (summed over both stores' children of that upstream) is printed beside the HTTP fixtures'.
 */
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { build } from "esbuild"
import { eraStdio, stdioFixture } from "../test/fixtures/paths.js"
import { bundleOptions } from "../scripts/bundle-options.mjs"
import { copyFileSync, mkdirSync, symlinkSync, existsSync, writeFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { parseArgs } from "node:util"
import { startStoreWithFixtures } from "./calls.js"
import { HttpClient, closedLoop, countAbortListenerWarnings } from "./load.js"
import { readServices } from "./resources.js"
import { ROOT, TSX_IMPORT, cpuSeconds, killAllNow, startFixtures, startStore, stopAll, workFolder, type StoreProcess } from "./procs.js"
import { readFileSync, readdirSync } from "node:fs"

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    transport: { type: "string", default: "stdio" },
    c: { type: "string", default: "32" },
    rounds: { type: "string", default: "24" },
    calls: { type: "string", default: "400" },
    services: { type: "string", default: "1000" },
    windows: { type: "string", default: "3" },
    seconds: { type: "string", default: "30" },
    neighbours: { type: "string", default: "10" },
    ways: { type: "string", default: "v1,v2,v1io,v2io,old,modern,oldio,modernio,rawio,rawmodernio" },
    concurrencies: { type: "string", default: "1,32" },
    within: { type: "boolean", default: false },
    "per-round": { type: "boolean", default: false },
    "b-traced": { type: "boolean", default: false }
  }
})

const log = (line: string) => process.stdout.write(`${line}\n`)
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length === 0 ? NaN : s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}
/**
 * The geometric mean of round ratios and its 95 % confidence interval (Student's t on the logs of
 * the ratios; rounds are paired A/B, so the machine's drift cancels within each).
 */
const ratioInterval = (ratios: ReadonlyArray<number>): { mean: number; low: number; high: number } => {
  const logs = ratios.map(Math.log)
  const n = logs.length
  const m = logs.reduce((x, y) => x + y, 0) / n
  const sd = Math.sqrt(logs.reduce((x, y) => x + (y - m) ** 2, 0) / Math.max(1, n - 1))
  // t(0.975, n-1) for small n, 1.96 beyond.
  const T = [12.71, 4.3, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.2, 2.18, 2.16, 2.14, 2.13, 2.12, 2.11, 2.1, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04]
  const t = T[n - 2] ?? 1.96
  const half = (t * sd) / Math.sqrt(n)
  return { mean: Math.exp(m), low: Math.exp(m - half), high: Math.exp(m + half) }
}
const loadavg = async () => (await import("node:os")).loadavg().map((l) => l.toFixed(2)).join(", ")

/** Builds the current sources with scripts/build.mjs's bundle options (one file, not split), into `<dir>/dist` (a directory of its own, so dist/ is left alone). */
const buildInto = async (dir: string) => {
  const out = resolve(dir)
  mkdirSync(join(out, "dist"), { recursive: true })
  await build({ ...bundleOptions, entryPoints: [join(ROOT, "src", "cli-entry.ts")], outfile: join(out, "dist", "mcp-store.mjs") })
  copyFileSync(join(ROOT, "src", "ui", "dashboard.html"), join(out, "dist", "dashboard.html"))
  copyFileSync(join(ROOT, "package.json"), join(out, "package.json"))
  if (!existsSync(join(out, "node_modules"))) symlinkSync(join(ROOT, "node_modules"), join(out, "node_modules"))
  log(`built ${join(out, "dist", "mcp-store.mjs")}`)
}

const script = (dir: string) => join(resolve(dir), "dist", "mcp-store.mjs")

/** The raw stdio responder of the `rawio` and `rawmodernio` cells. */
const RAW_UPSTREAM = join(ROOT, "bench", "raw-upstream.ts")

const SERVICE = { http: "fx-http", stdio: "fx-stdio" } as const

/** One store of an A/B run: its process, and one operation of a round (`i`-th of round `round`). */
interface Side {
  readonly label: string
  readonly store: StoreProcess
  readonly op: (round: number, i: number) => Promise<void>
}

/**
 * Interleaved rounds over two stores (A then B, B then A, alternating), two unmeasured rounds each
 * first: each store's CPU per operation summed from /proc over its own rounds, and B/A per round
 * with its 95 % interval.
 */
const interleave = async (sides: readonly [Side, Side], options: { c: number; rounds: number; calls: number; what: string }) => {
  const totals = sides.map(() => ({ cpu: 0, count: 0, perRound: [] as number[] }))
  const run = async (k: number, round: number, measure: boolean) => {
    const side = sides[k]!
    const cpu0 = cpuSeconds(side.store.child.pid)
    const r = await closedLoop((i) => side.op(round, i), { concurrency: options.c, calls: options.calls, warmup: 0, maxSeconds: 60 })
    if (r.errors > 0) throw new Error(`${side.label}: ${r.errors} errors: ${r.firstError}`)
    const used = cpuSeconds(side.store.child.pid) - cpu0
    if (measure) {
      totals[k]!.cpu += used
      totals[k]!.count += r.count
      totals[k]!.perRound.push((used * 1e6) / r.count)
    }
  }
  for (let w = 0; w < 2; w++) for (let k = 0; k < 2; k++) await run(k, -1 - w, false)
  const ratios: number[] = []
  for (let round = 0; round < options.rounds; round++) {
    for (const k of round % 2 === 0 ? [0, 1] : [1, 0]) await run(k, round, true)
    ratios.push(totals[1]!.perRound[round]! / totals[0]!.perRound[round]!)
  }
  const [usA, usB] = totals.map((t) => (t.cpu * 1e6) / t.count) as [number, number]
  const ci = ratioInterval(ratios)
  if (values["per-round"]) log(`  per round, µs/${options.what}: ${sides[0].label} ${totals[0]!.perRound.map((x) => x.toFixed(0)).join(" ")}; ${sides[1].label} ${totals[1]!.perRound.map((x) => x.toFixed(0)).join(" ")}`)
  log(
    `A ${usA.toFixed(1)} us/${options.what}, B ${usB.toFixed(1)} us/${options.what}: B/A ${(usB / usA).toFixed(3)} (median of round ratios ${median(ratios).toFixed(3)}; ` +
      `geometric mean ${ci.mean.toFixed(3)}, 95 % CI ${ci.low.toFixed(3)} to ${ci.high.toFixed(3)} over ${ratios.length} rounds); load ${await loadavg()}`
  )
  return { usA, usB, ci }
}

const abCalls = async (a: string, b: string) => {
  const transport = values.transport === "http" ? "http" : "stdio"
  const c = Number(values.c)
  const rounds = Number(values.rounds)
  const calls = Number(values.calls)
  const work = workFolder("mcp-store-ab-")
  const fixtures = await startFixtures(1)
  const url = fixtures.urls[0]!
  const sink = values["b-traced"] ? await otlpSink() : undefined
  const sides: Side[] = []
  const clients: HttpClient[] = []
  for (const [label, dir] of [["A", a], ["B", b]] as const) {
    const traced = label === "B" && sink !== undefined ? ["--otlp-endpoint", sink.url] : []
    const store = await startStoreWithFixtures(join(work, label), url, { script: script(dir), name: `store ${label}`, args: traced })
    const http = new HttpClient(store.url, c)
    clients.push(http)
    sides.push({
      label,
      store,
      op: async (round, i) => {
        const text = `${label}-${round}-${i}`
        const res = await http.post("/for_store/call_tool", { tool_name: "echo", service_name: SERVICE[transport], args: { text } })
        if (res.status !== 200 || (res.body as { result?: unknown }).result !== text) throw new Error(`${label}: HTTP ${res.status} ${res.text.slice(0, 200)}`)
      }
    })
  }
  log(`calls ${transport} c=${c}: ${rounds} rounds of ${calls} calls per store; A ${a}, B ${b}${sink === undefined ? "" : " (B traced)"}; load ${await loadavg()}`)
  await interleave([sides[0]!, sides[1]!], { c, rounds, calls, what: "call" })
  for (const http of clients) http.close()
  // The sink stays up until this process ends: a store's last export at its stop still reaches it.
  if (sink !== undefined) log(`OTLP sink: ${sink.requests()} export requests, ${(sink.bytes() / 1024).toFixed(0)} KiB`)
}

/** An OTLP/HTTP sink: reads each export request whole and answers 200 with an empty JSON body. */
const otlpSink = async () => {
  const { createServer } = await import("node:http")
  let requests = 0
  let bytes = 0
  const server = createServer((req, res) => {
    req.on("data", (chunk: Buffer) => (bytes += chunk.length))
    req.on("end", () => {
      requests += 1
      res.writeHead(200, { "content-type": "application/json" }).end("{}")
    })
  })
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done))
  const port = (server.address() as { port: number }).port
  server.unref()
  return { url: `http://127.0.0.1:${port}`, requests: () => requests, bytes: () => bytes }
}

/**
 * REST `read_resource` of distinct templated URIs (test://template/<n>/data) from the conformance
 * fixture (stdio), beside `neighbours` server-everything services in the same scope, as
 * bench/resources.ts reads them.
 */
const abReads = async (a: string, b: string) => {
  const c = Number(values.c)
  const rounds = Number(values.rounds)
  const calls = Number(values.calls)
  const neighbours = Number(values.neighbours)
  const work = workFolder("mcp-store-ab-reads-")
  const { names, mcpServers } = readServices(neighbours)
  const sides: Side[] = []
  const clients: HttpClient[] = []
  for (const [label, dir] of [["A", a], ["B", b]] as const) {
    mkdirSync(join(work, label), { recursive: true })
    const file = join(work, label, "mcp.json")
    writeFileSync(file, JSON.stringify({ mcpServers }))
    const store = await startStore(file, { script: script(dir), name: `store ${label}` })
    const http = new HttpClient(store.url, Math.max(c, 4))
    clients.push(http)
    for (const name of names) {
      const res = await http.post("/for_store/wait_service", { client_id_or_service_name: name, status: "healthy", timeout: 30 }, 35_000)
      if ((res.body as { data?: { result?: boolean } } | undefined)?.data?.result !== true) throw new Error(`${label}: ${name} not healthy`)
    }
    sides.push({
      label,
      store,
      op: async (round, i) => {
        const id = `${label}${round}n${i}`
        const res = await http.post("/for_store/read_resource", { uri: `test://template/${id}/data` })
        if (res.status !== 200 || !res.text.includes(id)) throw new Error(`${label}: HTTP ${res.status} ${res.text.slice(0, 200)}`)
      }
    })
  }
  log(`reads c=${c}, ${neighbours} neighbour services: ${rounds} rounds of ${calls} reads per store; A ${a}, B ${b}; load ${await loadavg()}`)
  await interleave([sides[0]!, sides[1]!], { c, rounds, calls, what: "read" })
  for (const http of clients) http.close()
}

const abIdle = async (a: string, b: string) => {
  const total = Number(values.services)
  const windows = Number(values.windows)
  const seconds = Number(values.seconds)
  const perAgent = 10
  const agents = Math.ceil(total / perAgent)
  const work = workFolder("mcp-store-ab-idle-")
  const fixtureProcs = await Promise.all(Array.from({ length: 4 }, (_, i) => startFixtures(1, `fixtures-${i}`)))
  const urls = fixtureProcs.flatMap((f) => f.urls)
  const stores: Array<{ label: string; store: StoreProcess; percents: number[] }> = []
  for (const [label, dir] of [["A", a], ["B", b]] as const) {
    mkdirSync(join(work, label), { recursive: true })
    const file = join(work, label, "mcp.json")
    writeFileSync(file, JSON.stringify({ mcpServers: {} }))
    const store = await startStore(file, { script: script(dir), name: `store ${label}`, monitoring: { health_check_seconds: 30 } })
    const http = new HttpClient(store.url, 16)
    let next = 0
    const adder = async () => {
      while (next < agents) {
        const n = next++
        const mcpServers: Record<string, { url: string }> = {}
        for (let s = 0; s < perAgent && n * perAgent + s < total; s++) mcpServers[`svc-${s}`] = { url: urls[(n * perAgent + s) % urls.length]! }
        const res = await http.post(`/for_agent/agent-${n}/add_service`, { mcpServers }, 60_000)
        if (res.status !== 200) throw new Error(`${label}: add_service: HTTP ${res.status}`)
      }
    }
    await Promise.all(Array.from({ length: 16 }, adder))
    for (;;) {
      const res = await http.get("/monitoring/services_status_distribution")
      const body = res.body as { distribution?: Record<string, number>; data?: { distribution?: Record<string, number> } }
      if (((body.distribution ?? body.data?.distribution ?? {})["healthy"] ?? 0) >= total) break
      await sleep(200)
    }
    http.close()
    stores.push({ label, store, percents: [] })
    log(`${label}: ${total} services healthy`)
  }
  log(`idle, ${total} services, checks every 30 s: settling 35 s, then ${windows} windows of ${seconds} s; load ${await loadavg()}`)
  await sleep(35_000)
  for (let w = 0; w < windows; w++) {
    const cpu0 = stores.map((s) => cpuSeconds(s.store.child.pid))
    const t0 = performance.now()
    await sleep(seconds * 1000)
    const wall = (performance.now() - t0) / 1000
    stores.forEach((s, i) => s.percents.push(((cpuSeconds(s.store.child.pid) - cpu0[i]!) / wall) * 100))
    log(`  window ${w + 1}: A ${stores[0]!.percents[w]!.toFixed(2)} %, B ${stores[1]!.percents[w]!.toFixed(2)} % of a core; load ${await loadavg()}`)
  }
  const mean = (xs: number[]) => xs.reduce((x, y) => x + y, 0) / xs.length
  const [A, B] = stores as [(typeof stores)[number], (typeof stores)[number]]
  log(`A ${mean(A.percents).toFixed(2)} %, B ${mean(B.percents).toFixed(2)} %: B/A ${(mean(B.percents) / mean(A.percents)).toFixed(3)}`)
}

/** The CPU seconds of the children of `pid` whose command line contains `match` (a store's stdio upstreams), 0 when none. */
const childrenCpu = (pid: number | undefined, match: string): number => {
  if (pid === undefined) return 0
  let sum = 0
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    let children: string[]
    try {
      children = readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").trim().split(/\s+/).filter((x) => x !== "")
    } catch {
      continue
    }
    for (const child of children) {
      try {
        if (readFileSync(`/proc/${child}/cmdline`, "utf8").split("\0").join(" ").includes(match)) sum += cpuSeconds(Number(child))
      } catch {
        // Gone since the listing.
      }
    }
  }
  return sum
}

const textOf = (content: unknown): unknown => (Array.isArray(content) ? (content[0] as { text?: unknown } | undefined)?.text : undefined)

/**
 * bench/eras.ts's cells, A/B: both stores with the same four services (the 2025 and the 2026-07-28
 * Streamable HTTP fixtures, shared; a stdio fixture of each era per store), each cell's calls
 * interleaved between the stores.
 */
const abEras = async (a: string, b: string) => {
  // The in-process SDK clients' abort-listener warnings: counted, and told at the end.
  const abortListenerWarnings = countAbortListenerWarnings()
  const rounds = Number(values.rounds)
  const calls = Number(values.calls)
  const ways = new Set(String(values.ways).split(","))
  const work = workFolder("mcp-store-ab-eras-")
  const [oldFixture, modernFixture] = await Promise.all([startFixtures(1, "fixtures (2025)"), startFixtures(1, "fixtures (2026-07-28)", ["--modern"])])
  const oldStdio = stdioFixture()
  const modernStdio = eraStdio("reject")
  const mcpServers = {
    old: { url: oldFixture.urls[0]! },
    modern: { url: modernFixture.urls[0]! },
    oldio: { command: oldStdio.command, args: oldStdio.args },
    modernio: { command: modernStdio.command, args: modernStdio.args },
    rawio: { command: process.execPath, args: [...TSX_IMPORT, RAW_UPSTREAM, "--era", "2025"] },
    rawmodernio: { command: process.execPath, args: [...TSX_IMPORT, RAW_UPSTREAM, "--era", "2026-07-28"] }
  }
  // What tells each stdio upstream's process among a store's children.
  const STDIO_MATCH: Record<string, string> = {
    oldio: "stdio-fixture",
    modernio: "era-stdio",
    rawio: "raw-upstream.ts --era 2025",
    rawmodernio: "raw-upstream.ts --era 2026-07-28"
  }
  const WAYS = [
    ["/mcp, 2025 client (session) → 2025 upstream, HTTP", "v1"],
    ["/mcp, 2026-07-28 client (no session) → 2025 upstream, HTTP", "v2"],
    ["/mcp, 2025 client (session) → 2025 upstream, stdio", "v1io"],
    ["/mcp, 2026-07-28 client (no session) → 2025 upstream, stdio", "v2io"],
    ["REST → 2025 upstream, HTTP", "old"],
    ["REST → 2026-07-28 upstream, HTTP", "modern"],
    ["REST → 2025 upstream, stdio", "oldio"],
    ["REST → 2026-07-28 upstream, stdio", "modernio"],
    ["REST → 2025 raw upstream, stdio", "rawio"],
    ["REST → 2026-07-28 raw upstream, stdio", "rawmodernio"]
  ] as const
  const stores: Array<{ label: string; store: StoreProcess; call: Record<(typeof WAYS)[number][1], (text: string) => Promise<void>>; close: () => Promise<void> }> = []
  for (const [label, dir] of [["A", a], ["B", b]] as const) {
    mkdirSync(join(work, label), { recursive: true })
    const file = join(work, label, "mcp.json")
    writeFileSync(file, JSON.stringify({ mcpServers }))
    const store = await startStore(file, { script: script(dir), name: `store ${label}` })
    const http = new HttpClient(store.url, 64)
    for (const name of Object.keys(mcpServers)) {
      const res = await http.post("/for_store/wait_service", { client_id_or_service_name: name, status: "healthy", timeout: 30 }, 35_000)
      if ((res.body as { data?: { result?: boolean } } | undefined)?.data?.result !== true) throw new Error(`${label}: ${name} not healthy`)
    }
    const v1 = new ClientV1({ name: "bench-2025", version: "1.0.0" })
    const v2 = new Client({ name: "bench-2026", version: "1.0.0" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } })
    await v1.connect(new TransportV1(new URL(`${store.url}/mcp`)))
    await v2.connect(new StreamableHTTPClientTransport(new URL(`${store.url}/mcp`)))
    const mcp = (client: ClientV1 | Client, service = "old") => async (text: string) => {
      const result = await client.callTool({ name: `${service}__echo`, arguments: { text } })
      if (textOf(result.content) !== text) throw new Error(`${label}: ${JSON.stringify(result).slice(0, 200)}`)
    }
    const rest = (service: string) => async (text: string) => {
      const res = await http.post("/for_store/call_tool", { tool_name: `${service}__echo`, args: { text } })
      if (res.status !== 200 || (res.body as { result?: unknown }).result !== text) throw new Error(`${label} REST ${service}: HTTP ${res.status} ${res.text.slice(0, 200)}`)
    }
    stores.push({
      label,
      store,
      call: {
        v1: mcp(v1),
        v2: mcp(v2),
        v1io: mcp(v1, "oldio"),
        v2io: mcp(v2, "oldio"),
        old: rest("old"),
        modern: rest("modern"),
        oldio: rest("oldio"),
        modernio: rest("modernio"),
        rawio: rest("rawio"),
        rawmodernio: rest("rawmodernio")
      },
      close: async () => {
        http.close()
        await Promise.allSettled([v1.close(), v2.close()])
      }
    })
  }
  log(`eras: ${rounds} rounds of ${calls} calls per store and cell; A ${a}, B ${b}; load ${await loadavg()}`)
  const results: Array<{ way: string; c: number; usA: number; usB: number; low: number; high: number; fixtureUs?: number }> = []
  const chosen = new Set(String(values.ways).split(","))
  const concurrencies = String(values.concurrencies).split(",").map(Number)
  const pairs = [
    ["/mcp: 2026-07-28 client / 2025 client", "v2", "v1"],
    ["/mcp, stdio upstream: 2026-07-28 client / 2025 client", "v2io", "v1io"],
    ["REST, HTTP: 2026-07-28 upstream / 2025 upstream", "modern", "old"],
    ["REST, stdio: 2026-07-28 upstream / 2025 upstream", "modernio", "oldio"],
    ["REST, raw stdio: 2026-07-28 upstream / 2025 upstream", "rawmodernio", "rawio"]
  ] as const
  const within: Array<{ c: number; name: string; store: string; usOld: number; usModern: number; low: number; high: number; upOld?: number; upModern?: number }> = []
  const upstreamCpu = (s: (typeof stores)[number], key: string): number | undefined =>
    STDIO_MATCH[key] === undefined ? undefined : childrenCpu(s.store.child.pid, STDIO_MATCH[key]!)
  for (const c of concurrencies) {
    // The eras interleaved within each store (`--within`): the 2025 way's rounds and the modern way's
    // alternate on the same store, so the ratio of the modern path to the 2025 one carries no drift.
    if (values.within) {
      for (const [name, modern, old] of pairs) {
        if (!chosen.has(modern) || !chosen.has(old)) continue
        for (const s of stores) {
          log(`c=${c} ${name}, within store ${s.label}`)
          const sides = [
            { label: "2025", store: s.store, op: (round: number, i: number) => s.call[old](`${s.label}-w${c}-o${round}-${i}`) },
            { label: "2026-07-28", store: s.store, op: (round: number, i: number) => s.call[modern](`${s.label}-w${c}-m${round}-${i}`) }
          ] as [Side, Side]
          const up0 = [upstreamCpu(s, old), upstreamCpu(s, modern)]
          const r = await interleave(sides, { c, rounds, calls, what: "call" })
          // The stdio upstreams' own CPU per call, warm-up rounds included (every call reached them).
          const perCall = (k: number, key: string) => {
            const now = upstreamCpu(s, key)
            return now === undefined || up0[k] === undefined ? undefined : ((now - up0[k]!) * 1e6) / ((rounds + 2) * calls)
          }
          const [upOld, upModern] = [perCall(0, old), perCall(1, modern)]
          if (upOld !== undefined && upModern !== undefined) log(`  the stdio upstreams' own CPU: 2025 ${upOld.toFixed(0)}, 2026-07-28 ${upModern.toFixed(0)} us/call`)
          within.push({ c, name, store: s.label, usOld: r.usA, usModern: r.usB, low: r.ci.low, high: r.ci.high, ...(upOld !== undefined ? { upOld } : {}), ...(upModern !== undefined ? { upModern } : {}) })
        }
      }
    }
    for (const [way, key] of WAYS) {
      if (!chosen.has(key)) continue
      log(`c=${c} ${way}`)
      const fixture = key === "old" ? oldFixture : key === "modern" ? modernFixture : undefined
      const fixtureCpu0 = fixture === undefined ? stores.reduce((x, s) => x + (upstreamCpu(s, key) ?? 0), 0) : cpuSeconds(fixture.child.pid)
      const sides = stores.map((s) => ({ label: s.label, store: s.store, op: (round: number, i: number) => s.call[key](`${s.label}-${c}-${round}-${i}`) })) as [Side, Side]
      const r = await interleave(sides, { c, rounds, calls, what: "call" })
      // Every call of the cell, warm-up rounds included, reached the fixture.
      const fixtureNow = fixture !== undefined ? cpuSeconds(fixture.child.pid) : STDIO_MATCH[key] !== undefined ? stores.reduce((x, s) => x + (upstreamCpu(s, key) ?? 0), 0) : undefined
      const fixtureUs = fixtureNow === undefined ? undefined : ((fixtureNow - fixtureCpu0) * 1e6) / ((rounds + 2) * 2 * calls)
      if (fixtureUs !== undefined) log(`  the fixture's own CPU: ${fixtureUs.toFixed(0)} us/call`)
      results.push({ way, c, usA: r.usA, usB: r.usB, low: r.ci.low, high: r.ci.high, ...(fixtureUs !== undefined ? { fixtureUs } : {}) })
    }
  }
  log("\n| way | c | A µs/call | B µs/call | B/A (95 % CI of round ratios) | upstream µs/call |")
  log("|---|---|---|---|---|---|")
  for (const r of results) log(`| ${r.way} | ${r.c} | ${r.usA.toFixed(0)} | ${r.usB.toFixed(0)} | ${(r.usB / r.usA).toFixed(3)} (${r.low.toFixed(3)}–${r.high.toFixed(3)}) | ${r.fixtureUs?.toFixed(0) ?? ""} |`)
  const at = (way: string, c: number) => results.find((r) => r.way === way && r.c === c)
  const wayOf = (key: string) => WAYS.find((w) => w[1] === key)![0]
  log("\n| c | ratio | A | B |")
  log("|---|---|---|---|")
  for (const c of concurrencies) {
    for (const [name, modernKey, oldKey] of pairs) {
      const modern = at(wayOf(modernKey), c)
      const old = at(wayOf(oldKey), c)
      if (modern === undefined || old === undefined) continue
      log(`| c=${c} | ${name} | ${(modern.usA / old.usA).toFixed(3)} | ${(modern.usB / old.usB).toFixed(3)} |`)
    }
  }
  if (within.length > 0) {
    log("\n| c | ratio, the eras interleaved within one store | store | 2025 µs/call | 2026-07-28 µs/call | ratio (95 % CI of round ratios) | stdio upstreams µs/call (2025, 2026-07-28) |")
    log("|---|---|---|---|---|---|---|")
    for (const w of within) {
      const up = w.upOld !== undefined && w.upModern !== undefined ? `${w.upOld.toFixed(0)}, ${w.upModern.toFixed(0)}` : ""
      log(`| ${w.c} | ${w.name} | ${w.store} | ${w.usOld.toFixed(0)} | ${w.usModern.toFixed(0)} | ${(w.usModern / w.usOld).toFixed(3)} (${w.low.toFixed(3)}–${w.high.toFixed(3)}) | ${up} |`)
    }
  }
  log(`load ${await loadavg()}`)
  if (abortListenerWarnings() > 0) log(`the in-process SDK clients drew ${abortListenerWarnings()} MaxListenersExceededWarnings (counted, not printed)`)
  for (const s of stores) await s.close()
}

const main = async () => {
  const [command, a, b] = positionals
  if (command === "build" && a) return buildInto(a)
  if (command === "calls" && a && b) return abCalls(a, b)
  if (command === "idle" && a && b) return abIdle(a, b)
  if (command === "reads" && a && b) return abReads(a, b)
  if (command === "eras" && a && b) return abEras(a, b)
  throw new Error("usage: bench/ab.ts build <dir> | calls <dirA> <dirB> [options] | reads <dirA> <dirB> [options] | idle <dirA> <dirB> [options] | eras <dirA> <dirB> [options]")
}

process.on("SIGINT", () => {
  killAllNow()
  process.exit(130)
})
try {
  await main()
} finally {
  await stopAll()
}
