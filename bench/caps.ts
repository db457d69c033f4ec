/**
 * The caps on long-lived things (safe by default) under a flood. Before them, 5,000
 * `initialize` calls on /mcp kept about 210 MB for ever and 5,000 idle /events streams took the
 * store from 0.5 to 2.1 GB. Two scenarios, each against a fresh store process as `npm start` runs
 * it (the bundle) with the default caps (1,000 MCP sessions, 100 event streams) and a short MCP idle
 * time (so the sessions' expiry is seen within the run):
 *
 * - `initialize`: 5,000 JSON-RPC initialize POSTs to /mcp, 50 at a time; each makes a session.
 * - `/events`: 5,000 `GET /events` attempts, 50 at a time; a stream that is let in stays open to
 *   the end of the flood, so all but the cap are refused (429 TOO_MANY); then the clients go.
 *
 * Recorded for each: the answers by status, the most live sessions or streams the store reported
 * (its /metrics gauges, read every 100 ms), the store's RSS (/proc VmRSS, read every 50 ms) before
 * the load, at its peak, when the flood ended (what it let in still held), after it was all
 * released (sessions expired, streams closed), and after a full garbage collection (the store runs
 * with --expose-gc and a preload that collects on SIGUSR2; "before" is read the same way), and the
 * latency of `GET /health` polled every 20 ms on its own connection during the flood (and for 2 s
 * before it, idle). Everything on 127.0.0.1, bounded in count and time.
 *
 *   npx tsx bench/caps.ts [--attempts 5000] [--concurrency 50] [--idle-seconds 5] [--max-seconds 60]
 *
 * Run alone it builds the bundle, prints a table and ends every process it started; `npm run bench`
 * runs it as its `caps` section (bench/run.ts) and writes the table to bench/RESULTS.md.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { Agent, request, type ClientRequest } from "node:http"
import { loadavg, tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { parseArgs } from "node:util"
import { HttpClient, summarize, type Latencies } from "./load.js"
import { buildStore, killAllNow, memoryMb, startStore, stopAll, stopChild, until } from "./procs.js"

export interface CapsOptions {
  /** Requests per scenario. */
  readonly attempts: number
  /** Requests in flight at once. */
  readonly concurrency: number
  /** `--mcp-session-idle-seconds` of the stores. */
  readonly idleSeconds: number
  /** Each flood stops after this long, done or not. */
  readonly maxSeconds: number
  readonly log: (line: string) => void
}

/** Resident memory of the store in MB at the moments of a scenario. */
export interface RssFigures {
  /** Idle, before the load, after a full GC. */
  readonly before: number
  readonly peak: number
  /** When the flood ended, with what it let in still held. */
  readonly loaded: number
  /** Once everything was released (sessions expired, streams closed). */
  readonly released: number
  /** The same after a full GC. */
  readonly releasedGc: number
}

export interface CapsScenario {
  readonly name: string
  /** The cap's option and value, e.g. `max_mcp_sessions 1000`. */
  readonly cap: string
  readonly capValue: number
  readonly attempts: number
  readonly concurrency: number
  /** Wall time of the flood. */
  readonly seconds: number
  /** Answers by HTTP status ("error" for a request that failed). */
  readonly answers: Readonly<Record<string, number>>
  /** Refusals (429) that carried Retry-After. */
  readonly retryAfter: number
  /** The most live sessions or streams the store reported during the flood. */
  readonly peakLive: number
  /** Latency of the flood's own requests (to the whole answer; to the headers for an open stream). */
  readonly requests: Latencies
  /** GET /health during the flood, and idle before it. */
  readonly health: Latencies
  readonly healthIdle: Latencies
  readonly rss: RssFigures
  /** From the end of the flood (clients closed) to nothing held. */
  readonly releaseMs: number
}

export interface CapsResult {
  readonly idleSeconds: number
  readonly scenarios: ReadonlyArray<CapsScenario>
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))
const DEFAULT_MAX_SESSIONS = 1000
const DEFAULT_MAX_STREAMS = 100

const GC_DONE = "bench-caps: gc done"
// Collects on SIGUSR2 and says so on stderr (the benchmark keeps the last lines of a child's stderr).
const GC_PRELOAD = `data:text/javascript,${encodeURIComponent(
  `let n = 0; process.on("SIGUSR2", () => { globalThis.gc(); globalThis.gc(); process.stderr.write("${GC_DONE} " + ++n + "\\n") })`
)}`

/** A store with the default caps but `idleSeconds` for MCP sessions, ready to collect on demand. */
const startCapsStore = async (dir: string, name: string, idleSeconds: number) => {
  mkdirSync(dir, { recursive: true })
  const configFile = join(dir, "mcp.json")
  writeFileSync(configFile, '{"mcpServers": {}}\n')
  const store = await startStore(configFile, {
    name,
    nodeArgs: ["--expose-gc", "--import", GC_PRELOAD],
    args: ["--mcp-session-idle-seconds", String(idleSeconds)]
  })
  let collections = 0
  /** RSS in MB after a full GC in the store. */
  const rssAfterGc = async (): Promise<number> => {
    collections += 1
    process.kill(store.child.pid, "SIGUSR2")
    const line = `${GC_DONE} ${collections}`
    await until(`the store's GC #${collections}`, async () => store.child.tail().split("\n").includes(line), 10_000, 10)
    return memoryMb(store.child.pid).rss
  }
  return { store, rssAfterGc }
}

/** The store's live sessions and event streams, from its /metrics gauges. */
const liveCounts = async (client: HttpClient) => {
  const text = (await client.get("/metrics", 10_000)).text
  const gauge = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1] ?? NaN)
  return { sessions: gauge("mcpstore_mcp_sessions"), streams: gauge("mcpstore_event_streams") }
}

/** Runs `probe` every `everyMs` (after the previous one ended) until stopped. */
const poll = (probe: () => Promise<void>, everyMs: number) => {
  let running = true
  const done = (async () => {
    while (running) {
      await probe().catch(() => undefined)
      await sleep(everyMs)
    }
  })()
  return async () => {
    running = false
    await done
  }
}

/** GET /health every 20 ms on its own connection, until stopped; resolves with the latencies. */
const pollHealth = (url: string) => {
  const client = new HttpClient(url, 1)
  const latencies: number[] = []
  const stop = poll(async () => {
    const t0 = performance.now()
    const res = await client.get("/health", 10_000)
    if (res.status === 200) latencies.push(performance.now() - t0)
  }, 20)
  return async () => {
    await stop()
    client.close()
    return summarize(latencies)
  }
}

interface Answer {
  readonly status: number | "error"
  readonly retryAfter: boolean
  readonly ms: number
  /** A 200 event stream, left open. */
  readonly open?: ClientRequest
}

/** One request; a 200 answer to a GET is an event stream, handed back open. */
const send = (agent: Agent, url: string, method: "GET" | "POST", path: string, body?: string): Promise<Answer> =>
  new Promise((resolvePromise) => {
    const t0 = performance.now()
    const req = request(
      `${url}${path}`,
      {
        method,
        agent,
        headers: body === undefined ? { accept: "text/event-stream" } : { "content-type": "application/json", accept: "application/json, text/event-stream" }
      },
      (res) => {
        const status = res.statusCode ?? 0
        const retryAfter = res.headers["retry-after"] !== undefined
        res.resume()
        if (method === "GET" && status === 200) return resolvePromise({ status, retryAfter, ms: performance.now() - t0, open: req })
        res.on("end", () => resolvePromise({ status, retryAfter, ms: performance.now() - t0 }))
        res.on("error", () => resolvePromise({ status: "error", retryAfter, ms: performance.now() - t0 }))
      }
    )
    req.setTimeout(30_000, () => req.destroy(new Error("no answer within 30 s")))
    req.on("error", () => resolvePromise({ status: "error", retryAfter: false, ms: performance.now() - t0 }))
    req.end(body)
  })

/** `count` requests, `concurrency` at a time, stopping after `maxSeconds`. */
const flood = async (count: number, concurrency: number, maxSeconds: number, task: () => Promise<Answer>) => {
  const answers: Answer[] = []
  const deadline = performance.now() + maxSeconds * 1000
  let issued = 0
  const worker = async () => {
    while (issued < count && performance.now() < deadline) {
      issued++
      answers.push(await task())
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
  return answers
}

const INITIALIZE = JSON.stringify({
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "bench-caps", version: "1" } }
})

type Kind = "initialize" | "events"

const runScenario = async (dir: string, kind: Kind, options: CapsOptions): Promise<CapsScenario> => {
  const { store, rssAfterGc } = await startCapsStore(join(dir, kind), `store (caps: ${kind})`, options.idleSeconds)
  const url = store.url
  const capValue = kind === "initialize" ? DEFAULT_MAX_SESSIONS : DEFAULT_MAX_STREAMS
  const live = (c: { sessions: number; streams: number }) => (kind === "initialize" ? c.sessions : c.streams)
  const metrics = new HttpClient(url, 1)
  const agent = new Agent({ keepAlive: true, maxSockets: options.concurrency + capValue + 10, timeout: 60_000 })
  try {
    const before = await rssAfterGc()
    const stopIdleHealth = pollHealth(url)
    await sleep(2000)
    const healthIdle = await stopIdleHealth()

    let peak = memoryMb(store.child.pid).rss
    const stopRss = poll(async () => {
      peak = Math.max(peak, memoryMb(store.child.pid).rss)
    }, 50)
    let peakLive = 0
    const stopLive = poll(async () => {
      peakLive = Math.max(peakLive, live(await liveCounts(metrics)))
    }, 100)
    const stopHealth = pollHealth(url)
    const t0 = performance.now()
    const answers = await flood(options.attempts, options.concurrency, options.maxSeconds, () =>
      kind === "initialize" ? send(agent, url, "POST", "/mcp", INITIALIZE) : send(agent, url, "GET", "/events")
    )
    const seconds = (performance.now() - t0) / 1000
    const health = await stopHealth()
    const loaded = memoryMb(store.child.pid).rss
    options.log(`  ${kind}: ${answers.length} requests in ${seconds.toFixed(1)} s; RSS ${loaded.toFixed(0)} MB with ${kind === "initialize" ? "the sessions" : "the streams"} held`)

    // Release: the streams' clients go; the sessions expire after the idle time.
    const released0 = performance.now()
    for (const a of answers) a.open?.destroy()
    await until(`nothing held after the ${kind} flood`, async () => live(await liveCounts(metrics)) === 0, (options.idleSeconds + 30) * 1000, 50)
    const releaseMs = performance.now() - released0
    await stopLive()
    await stopRss()
    const released = memoryMb(store.child.pid).rss
    const releasedGc = await rssAfterGc()

    const counts: Record<string, number> = {}
    for (const a of answers) counts[String(a.status)] = (counts[String(a.status)] ?? 0) + 1
    return {
      name: kind === "initialize" ? "initialize on /mcp" : "GET /events",
      cap: kind === "initialize" ? `max_mcp_sessions ${capValue}` : `max_event_streams ${capValue}`,
      capValue,
      attempts: answers.length,
      concurrency: options.concurrency,
      seconds,
      answers: counts,
      retryAfter: answers.filter((a) => a.status === 429 && a.retryAfter).length,
      peakLive,
      requests: summarize(answers.map((a) => a.ms)),
      health,
      healthIdle,
      rss: { before, peak, loaded, released, releasedGc },
      releaseMs
    }
  } finally {
    agent.destroy()
    metrics.close()
    await stopChild(store.child)
  }
}

/** Both scenarios, one fresh store each. */
export const runCaps = async (dir: string, options: CapsOptions): Promise<CapsResult> => {
  const scenarios: CapsScenario[] = []
  for (const kind of ["initialize", "events"] as const) scenarios.push(await runScenario(dir, kind, options))
  return { idleSeconds: options.idleSeconds, scenarios }
}

const f = (v: number, digits = 0) => (Number.isFinite(v) ? v.toFixed(digits) : "-")

/** The table of the caps section: a header and a row per scenario. */
export const capsTable = (r: CapsResult): { header: string[]; rows: string[][] } => ({
  header: [
    "flood",
    "cap",
    "requests (c)",
    "answers",
    "most live",
    "RSS MB: before / peak / flood ended / released / released, GC",
    "release s",
    "GET /health ms under load: p50 / p99 / max (idle p50)",
    "flood requests ms: p50 / p99"
  ],
  rows: r.scenarios.map((s) => [
    s.name,
    s.cap,
    `${s.attempts} (${s.concurrency})`,
    Object.entries(s.answers)
      .map(([status, n]) => `${n} x ${status}`)
      .join(", "),
    String(s.peakLive),
    `${f(s.rss.before)} / ${f(s.rss.peak)} / ${f(s.rss.loaded)} / ${f(s.rss.released)} / ${f(s.rss.releasedGc)}`,
    f(s.releaseMs / 1000, 1),
    `${f(s.health.p50, 2)} / ${f(s.health.p99, 2)} / ${f(s.health.max, 2)} (${f(s.healthIdle.p50, 2)})`,
    `${f(s.requests.p50, 2)} / ${f(s.requests.p99, 2)}`
  ])
})

/** What the table's columns mean (for RESULTS.md). */
export const capsDescription = (r: CapsResult): string =>
  `Each flood against a fresh store process (the bundle) with the default caps and \`--mcp-session-idle-seconds ${r.idleSeconds}\`, ` +
  `c requests in flight at once (bench/caps.ts). *initialize*: JSON-RPC initialize POSTs to /mcp, each making a session; ` +
  `*GET /events*: a stream that is let in stays open until the flood ends, then its client goes. *most live*: the store's ` +
  `\`mcpstore_mcp_sessions\` or \`mcpstore_event_streams\` gauge, read every 100 ms. RSS is the store's VmRSS: *before* idle ` +
  `after a full GC (\`--expose-gc\`, collected on a signal), *peak* read every 50 ms, *flood ended* with what it let in still ` +
  `held, *released* once the sessions expired or the streams closed (*release s* after the flood), then after a full GC. ` +
  `\`GET /health\` polled every 20 ms on its own connection during the flood, and for 2 s before it.`

const textTable = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)))
  const line = (r: ReadonlyArray<string>) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ")
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n")
}

/** The caps table as plain text. */
export const capsText = (r: CapsResult): string => {
  const { header, rows } = capsTable(r)
  return textTable(header, rows)
}

// Run alone: `npx tsx bench/caps.ts`.
if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({
    options: {
      attempts: { type: "string", default: "5000" },
      concurrency: { type: "string", default: "50" },
      "idle-seconds": { type: "string", default: "5" },
      "max-seconds": { type: "string", default: "60" }
    },
    strict: true
  })
  let cleaning: Promise<void> | undefined
  const cleanup = () => (cleaning ??= stopAll())
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.on(signal, () => {
      if (cleaning) return
      void cleanup().finally(() => process.exit(130))
    })
  }
  process.on("exit", () => killAllNow())
  const watchdog = setTimeout(() => {
    process.stderr.write("bench/caps.ts: over 5 minutes: giving up\n")
    void cleanup().finally(() => process.exit(2))
  }, 5 * 60_000)
  watchdog.unref()
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-caps-"))
  const log = (line: string) => process.stdout.write(`${line}\n`)
  try {
    const load = () => loadavg().map((l) => l.toFixed(2)).join(", ")
    log(`bench/caps.ts: node ${process.version}, load ${load()}`)
    log(`built dist/mcp-store.mjs in ${buildStore().toFixed(0)} ms`)
    const result = await runCaps(dir, {
      attempts: Number(values.attempts),
      concurrency: Number(values.concurrency),
      idleSeconds: Number(values["idle-seconds"]),
      maxSeconds: Number(values["max-seconds"]),
      log
    })
    log(`\nCaps under a flood (load after: ${load()})\n${capsText(result)}`)
  } catch (e) {
    process.stderr.write(`bench/caps.ts: ${e instanceof Error ? e.stack : String(e)}\n`)
    process.exitCode = 1
  } finally {
    await cleanup()
    clearTimeout(watchdog)
    rmSync(dir, { recursive: true, force: true })
  }
}
