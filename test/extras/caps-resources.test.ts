// The caps hold memory down under a flood (safe by default): before them, 5,000
// `initialize` calls on /mcp kept about 210 MB for ever and 5,000 idle /events streams took the
// store from 0.5 to 2.1 GB. Against a store process (its bundle, as the fault tests
// run it; its own memory, untouched by this test's clients): 1,000 initialize POSTs (five times the
// session cap: 800 sessions evicted) and 500 /events attempts (25 times the stream cap), 50 at a
// time. Live sessions never exceed max_mcp_sessions, the streams past max_event_streams get 429
// TOO_MANY, the stream count returns to 0 once the clients close, the sessions expire after
// mcp_session_idle_seconds, and what the store keeps comes back to what it kept after a smaller
// warm-up flood: its V8 heap in use within 3 MB (measured: about 1 KB a session of the flood stays,
// the bounded list of ended session ids), its RSS within 50 MB. What the floods would keep without
// the caps, measured on this store with the caps lifted: about 9 KB of heap a live session (9 MB for
// the 1,000, three times the heap margin) and 145 KB of heap and RSS an open stream (72 MB for the
// 500: 24 times the heap margin, beyond the RSS margin too). The RSS alone varies by tens of MB
// between identical runs, which is why the heap is the close measure. Both are read after a full
// garbage collection in the store (started with --expose-gc and a preload that collects on SIGUSR2
// and reports its heap): V8 grows its heap lazily under load and shrinks it when it likes, and what
// is asked here is what the store keeps, not when V8 gives pages back. The caps are small (200
// sessions, 20 streams) so that reaching them is quick.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { Agent, request, type ClientRequest } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, expect, it } from "vitest"
import { eventually, parsePrometheus, rssOf, sampleEvery, sampleValue, spawnStore, type StoreProcess } from "../support/index.js"

const MAX_SESSIONS = 200
const MAX_STREAMS = 20
const IDLE_SECONDS = 2
const CONCURRENCY = 50
const INITIALIZES = 1000
const STREAM_ATTEMPTS = 500
const MB = 1024 * 1024
const GC_DONE = "caps-resources: gc done, heap used "
const GC_PRELOAD = `data:text/javascript,${encodeURIComponent(
  `process.on("SIGUSR2", () => { globalThis.gc(); globalThis.gc(); process.stdout.write(${JSON.stringify(GC_DONE)} + process.memoryUsage().heapUsed + "\\n") })`
)}`

let dir: string
let store: StoreProcess
let agent: Agent

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "mcp-store-caps-"))
  const configFile = join(dir, "mcp.json")
  writeFileSync(configFile, '{"mcpServers": {}}\n')
  store = await spawnStore({
    configFile,
    nodeArgs: ["--expose-gc", "--import", GC_PRELOAD],
    extraArgs: [
      "--max-mcp-sessions",
      String(MAX_SESSIONS),
      "--max-event-streams",
      String(MAX_STREAMS),
      "--mcp-session-idle-seconds",
      String(IDLE_SECONDS)
    ]
  })
  agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY + MAX_STREAMS + 10 })
})

afterAll(async () => {
  agent?.destroy()
  await store?.kill()
  rmSync(dir, { recursive: true, force: true })
})

const INITIALIZE = JSON.stringify({
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "caps-resources", version: "1" } }
})

interface Answer {
  readonly status: number
  readonly retryAfter: string | undefined
  readonly session: string | undefined
  /** A 200 event stream, left open. */
  readonly open?: ClientRequest
}

/** One request on the keep-alive agent; a 200 event stream is left open and handed back to close later. */
const send = (method: string, path: string, body?: string, headers: Record<string, string> = {}) =>
  new Promise<Answer>((resolve, reject) => {
    const req = request(
      `${store.url}${path}`,
      {
        method,
        agent,
        headers: {
          ...(body === undefined ? { accept: "text/event-stream" } : { "content-type": "application/json", accept: "application/json, text/event-stream" }),
          ...headers
        }
      },
      (res) => {
        const status = res.statusCode ?? 0
        const retryAfter = res.headers["retry-after"]
        const session = res.headers["mcp-session-id"] as string | undefined
        if (method === "GET" && status === 200) {
          res.resume()
          return resolve({ status, retryAfter, session, open: req })
        }
        res.resume()
        res.on("end", () => resolve({ status, retryAfter, session }))
        res.on("error", reject)
      }
    )
    req.setTimeout(15_000, () => req.destroy(new Error(`${method} ${path}: no answer within 15 s`)))
    req.on("error", reject)
    req.end(body)
  })

/** Runs `task` `count` times, `CONCURRENCY` at a time; stops early (and says so) past `ms`. */
const flood = async <T>(count: number, ms: number, task: () => Promise<T>): Promise<T[]> => {
  const out: T[] = []
  const deadline = performance.now() + ms
  let issued = 0
  const worker = async () => {
    while (issued < count && performance.now() < deadline) {
      issued++
      out.push(await task())
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  return out
}

const figures = async () => {
  const res = await fetch(`${store.url}/metrics`, { signal: AbortSignal.timeout(10_000) })
  const samples = parsePrometheus(await res.text())
  return { sessions: sampleValue(samples, "mcpstore_mcp_sessions"), streams: sampleValue(samples, "mcpstore_event_streams") }
}

/** The store's RSS and V8 heap in use after a full garbage collection in it (its report awaited). */
const keptAfterGc = async (): Promise<{ rss: number; heap: number }> => {
  const reports = () => store.output().split(GC_DONE).slice(1)
  const before = reports().length
  process.kill(store.pid, "SIGUSR2")
  expect(await eventually(() => reports().length > before && reports().at(-1)!.includes("\n"), 5_000)).toBe(true)
  return { rss: rssOf(store.pid)!, heap: Number.parseInt(reports().at(-1)!, 10) }
}

/** Samples the live counts every 50 ms until `stop()`; resolves with the highest seen. */
const watchPeaks = () => {
  const peak = { sessions: 0, streams: 0, samples: 0 }
  const sampler = sampleEvery(50, async () => {
    const f = await figures()
    peak.sessions = Math.max(peak.sessions, f.sessions)
    peak.streams = Math.max(peak.streams, f.streams)
    peak.samples++
  })
  return {
    stop: async () => {
      await sampler.stop()
      return peak
    }
  }
}

it("1,000 initialize calls and 500 /events attempts stay within the caps and leave the heap within 3 MB, the RSS within 50 MB", { timeout: 150_000 }, async () => {
  // Warm-up: code compiled on first use, and the heap and allocator grown to what a flood needs,
  // are not a leak. Its sessions are ended with DELETE (the last ones to answer are the live ones),
  // its streams by their clients; the baseline is taken once nothing is held.
  const t0 = performance.now()
  const warmSessions = await flood(MAX_SESSIONS + 100, 15_000, () => send("POST", "/mcp", INITIALIZE))
  const warmStreams = await flood(MAX_STREAMS + 80, 10_000, () => send("GET", "/events"))
  for (const r of warmStreams) r.open?.destroy()
  const ended = await flood(MAX_SESSIONS + CONCURRENCY, 10_000, async () => {
    const { session } = warmSessions.pop()!
    return send("DELETE", "/mcp", undefined, { "mcp-session-id": session!, "mcp-protocol-version": "2025-06-18" })
  })
  // 404 for one evicted, or already expired on a slow machine.
  expect(ended.every((r) => r.status === 200 || r.status === 404)).toBe(true)
  expect(await eventually(async () => {
    const f = await figures()
    return f.sessions === 0 && f.streams === 0
  }, (IDLE_SECONDS + 5) * 1000)).toBe(true)
  const before = await keptAfterGc()
  const t1 = performance.now()

  const sessionsWatch = watchPeaks()
  const inits = await flood(INITIALIZES, 50_000, () => send("POST", "/mcp", INITIALIZE))
  const sessionPeak = await sessionsWatch.stop()
  expect(inits.length).toBe(INITIALIZES)
  // Never more than 50 sessions are busy, so the oldest idle one always makes room: no refusals.
  expect(inits.filter((r) => r.status === 200).length).toBe(INITIALIZES)
  expect(sessionPeak.samples).toBeGreaterThan(3)
  expect(sessionPeak.sessions).toBeLessThanOrEqual(MAX_SESSIONS)
  expect(sessionPeak.sessions).toBeGreaterThanOrEqual(MAX_SESSIONS * 0.9)
  const during = rssOf(store.pid)!
  const t2 = performance.now()

  const streamsWatch = watchPeaks()
  const attempts = await flood(STREAM_ATTEMPTS, 50_000, () => send("GET", "/events"))
  const streamPeak = await streamsWatch.stop()
  expect(attempts.length).toBe(STREAM_ATTEMPTS)
  const opened = attempts.filter((r) => r.status === 200)
  const refused = attempts.filter((r) => r.status === 429)
  expect(opened.length).toBe(MAX_STREAMS)
  expect(refused.length).toBe(STREAM_ATTEMPTS - MAX_STREAMS)
  expect(refused.every((r) => r.retryAfter === "5")).toBe(true)
  expect(streamPeak.streams).toBe(MAX_STREAMS)
  const t3 = performance.now()
  for (const r of opened) r.open!.destroy()
  expect(await eventually(async () => (await figures()).streams === 0, 5_000)).toBe(true)
  // The sessions of the flood expire once idle for IDLE_SECONDS.
  expect(await eventually(async () => (await figures()).sessions === 0, (IDLE_SECONDS + 5) * 1000)).toBe(true)

  const uncollected = rssOf(store.pid)!
  // The least of three collections: a leak survives every one, while the allocator hands pages back
  // to the system at its own pace (one RSS reading alone varied by 40 MB between identical runs).
  const collected = [await keptAfterGc(), await keptAfterGc(), await keptAfterGc()]
  const after = { rss: Math.min(...collected.map((c) => c.rss)), heap: Math.min(...collected.map((c) => c.heap)) }
  const summary =
    `heap in use before ${(before.heap / MB).toFixed(1)} MB, after ${(after.heap / MB).toFixed(1)} MB; ` +
    `RSS before ${(before.rss / MB).toFixed(0)} MB, after the initialize flood ${(during / MB).toFixed(0)} MB, ` +
    `after both ${(uncollected / MB).toFixed(0)} MB, after a collection ${(after.rss / MB).toFixed(0)} MB`
  expect(after.heap - before.heap, summary).toBeLessThan(3 * MB)
  expect(after.rss - before.rss, summary).toBeLessThan(50 * MB)
  const s = (a: number, b: number) => ((b - a) / 1000).toFixed(1)
  console.log(
    `caps-resources: ${summary}; peak sessions ${sessionPeak.sessions}, peak streams ${streamPeak.streams}; ` +
      `seconds: warm-up ${s(t0, t1)}, initialize flood ${s(t1, t2)}, /events flood ${s(t2, t3)}, release ${s(t3, performance.now())}`
  )
})
