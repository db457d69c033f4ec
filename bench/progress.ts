/**
 * A call with progress, beside the tool-call cells: the HTTP fixture's `progress` tool
 * (test/fixtures/fixture-server.ts: `count` notifications/progress for the call's token, then the
 * answer) called with 0 and with 100 notifications, side by side: directly with the MCP SDK client
 * (`onprogress`, so the request carries a token), through the store's REST `call_tool` (the store's
 * own token upstream; the progress restarts the time-out and, with an `/events` subscriber open in
 * the `store-rest+events` way, goes out as `progress` events), and through the store's `/mcp` from an
 * SDK client with its own progressToken. Per way: the p50 at 0 and at 100, the added latency per
 * notification ((p50 at 100 - p50 at 0) / 100) and the store's CPU per notification.
 *
 * Then a flood: calls of `floodCount` notifications each through `/mcp` and through REST with an
 * `/events` subscriber that does not read: the store's resident memory before and after and its
 * peak, which the throttles (src/runtime/progress.ts, one value and one timer per way out) keep
 * flat however many arrive.
 *
 *   node --import tsx bench/progress.ts   (alone: BENCH_CALLS, BENCH_WARMUP, BENCH_CONCURRENCY as in run.ts; BENCH_FLOOD=n notifications per flood call)
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { mkdirSync, writeFileSync } from "node:fs"
import { request, type ClientRequest } from "node:http"
import { join } from "node:path"
import { HttpClient, closedLoop, type RunResult } from "./load.js"
import { buildStore, cpuSeconds, memoryMb, onCleanup, startFixtures, startStore, stopAll, stopChild, workFolder } from "./procs.js"

export type ProgressWay = "direct" | "store-rest" | "store-rest+events" | "store-mcp"
export const PROGRESS_WAYS: ReadonlyArray<ProgressWay> = ["direct", "store-rest", "store-rest+events", "store-mcp"]
export const PROGRESS_COUNTS: ReadonlyArray<number> = [0, 100]

export interface ProgressCell extends RunResult {
  readonly concurrency: number
  readonly way: ProgressWay
  /** Notifications the upstream sends per call. */
  readonly notifications: number
  /** CPU time of the store per call, in microseconds; null for direct. */
  readonly cpuUsPerCall: number | null
}

/** Per way and concurrency: what 100 notifications add to a call. */
export interface ProgressCost {
  readonly concurrency: number
  readonly way: ProgressWay
  /** (p50 with N notifications - p50 with none) / N, in microseconds. */
  readonly addedUsPerNotification: number
  /** The store's CPU per notification, in microseconds; null for direct. */
  readonly cpuUsPerNotification: number | null
  /** Progress notifications the caller heard per call (direct, /mcp) or /events progress events per call. */
  readonly heardPerCall: number | null
}

export interface ProgressFlood {
  readonly way: "store-mcp" | "store-rest+events"
  readonly calls: number
  readonly notificationsPerCall: number
  readonly seconds: number
  readonly rssBeforeMb: number
  readonly rssAfterMb: number
  readonly peakMb: number
}

export interface ProgressResults {
  readonly cells: ReadonlyArray<ProgressCell>
  readonly costs: ReadonlyArray<ProgressCost>
  readonly floods: ReadonlyArray<ProgressFlood>
}

const SERVICE = "fx"

/** Checks the tool's answer: `count` notifications sent, or none when the call carried no token (`tokenless` allowed). */
const answered = (content: unknown, count: number, way: string, tokenless = false) => {
  const text = (content as Array<{ type?: string; text?: string }> | undefined)?.[0]?.text
  if (text !== `sent ${count} progress notifications` && !(tokenless && text === "sent 0 progress notifications")) {
    throw new Error(`${way}: unexpected result ${JSON.stringify(content).slice(0, 200)}`)
  }
}

/** An SDK client whose calls carry a progressToken; counts the progress it hears. */
const sdkCaller = async (name: string, url: string) => {
  const client = new Client({ name: `bench-${name}`, version: "1.0.0" })
  await client.connect(new StreamableHTTPClientTransport(new URL(url)))
  const unregister = onCleanup(() => client.close())
  let heard = 0
  return {
    call: async (tool: string, count: number) => {
      const result = await client.callTool({ name: tool, arguments: { count } }, undefined, { onprogress: () => void heard++, timeout: 120_000 })
      answered(result.content, count, name)
    },
    heard: () => heard,
    close: async () => {
      unregister()
      await client.close()
    }
  }
}

/**
 * An `/events` stream of the store that counts its `progress` events; `paused` leaves the socket
 * unread (a subscriber that does not keep up).
 */
const eventsSubscriber = (storeUrl: string, paused = false): Promise<{ progress: () => number; close: () => void }> =>
  new Promise((resolve, reject) => {
    const u = new URL("/events", storeUrl)
    let progress = 0
    let req: ClientRequest | undefined = undefined
    const close = () => void req?.destroy()
    const unregister = onCleanup(close)
    req = request({ host: u.hostname, port: u.port, path: u.pathname, headers: { accept: "text/event-stream" } }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`/events: HTTP ${res.statusCode}`))
      res.setEncoding("utf8")
      let tail = ""
      res.on("data", (chunk: string) => {
        const text = tail + chunk
        const parts = text.split("event: progress\n")
        progress += parts.length - 1
        tail = parts[parts.length - 1]!.slice(-20)
        if (paused) res.pause()
      })
      res.on("error", () => undefined)
      resolve({
        progress: () => progress,
        close: () => {
          unregister()
          close()
        }
      })
    })
    req.on("error", reject)
    req.end()
  })

/** Runs every cell and the floods; everything started here is stopped before it resolves. */
export const runProgress = async (
  dir: string,
  options: { concurrencies: ReadonlyArray<number>; calls: number; warmup: number; maxSeconds: number; floodCalls: number; floodCount: number; log: (line: string) => void }
): Promise<ProgressResults> => {
  mkdirSync(dir, { recursive: true })
  const fixtures = await startFixtures(1, "fixtures (progress)", ["--progress-tool"])
  const url = fixtures.urls[0]!
  const configFile = join(dir, "mcp.json")
  writeFileSync(configFile, JSON.stringify({ mcpServers: { [SERVICE]: { url } } }, null, 2))
  const store = await startStore(configFile, { name: "store (progress)" })
  const pid = store.child.pid
  const http = new HttpClient(store.url, Math.max(8, ...options.concurrencies))
  const closers: Array<() => Promise<void>> = [() => stopChild(fixtures.child), async () => http.close(), () => stopChild(store.child)]
  try {
    const ready = await http.post("/for_store/wait_service", { client_id_or_service_name: SERVICE, status: "healthy", timeout: 30 }, 35_000)
    if ((ready.body as { data?: { result?: boolean } } | undefined)?.data?.result !== true) throw new Error(`store: ${SERVICE} not healthy: ${JSON.stringify(ready.body)}`)
    const direct = await sdkCaller("direct", url)
    closers.push(direct.close)
    const mcp = await sdkCaller("store-mcp", `${store.url}/mcp`)
    closers.push(mcp.close)
    const rest = async (count: number) => {
      const res = await http.post("/for_store/call_tool", { tool_name: "progress", service_name: SERVICE, args: { count } }, 120_000)
      if (res.status !== 200) throw new Error(`store-rest: HTTP ${res.status} ${res.text.slice(0, 200)}`)
      // Without a listener the store may send no token upstream (then the tool sends nothing).
      answered((res.body as { content?: unknown }).content, count, "store-rest", true)
    }
    let events: Awaited<ReturnType<typeof eventsSubscriber>> | undefined
    const callers: Record<ProgressWay, (count: number) => Promise<void>> = {
      direct: (count) => direct.call("progress", count),
      "store-rest": rest,
      "store-rest+events": rest,
      "store-mcp": (count) => mcp.call(`${SERVICE}__progress`, count)
    }
    const heard: Record<ProgressWay, () => number | null> = {
      direct: direct.heard,
      "store-rest": () => null,
      "store-rest+events": () => events?.progress() ?? 0,
      "store-mcp": mcp.heard
    }

    for (const way of PROGRESS_WAYS) for (const count of PROGRESS_COUNTS) await closedLoop(() => callers[way](count), { concurrency: 4, calls: 0, warmup: options.warmup, maxSeconds: options.maxSeconds })
    const cells: ProgressCell[] = []
    const costs: ProgressCost[] = []
    let rotation = 0
    for (const concurrency of options.concurrencies) {
      const order = PROGRESS_WAYS.map((_, k) => PROGRESS_WAYS[(k + rotation) % PROGRESS_WAYS.length]!)
      rotation++
      for (const way of order) {
        if (way === "store-rest+events") events = await eventsSubscriber(store.url)
        const byCount = new Map<number, { result: RunResult; cpuUsPerCall: number | null; heardPerCall: number | null }>()
        for (const count of PROGRESS_COUNTS) {
          const warmup = Math.max(options.warmup, concurrency * 2)
          const cpuBefore = cpuSeconds(pid)
          const heardBefore = heard[way]()
          const result = await closedLoop(() => callers[way](count), { concurrency, calls: options.calls, warmup, maxSeconds: options.maxSeconds })
          const total = warmup + result.count + result.errors
          const heardAfter = heard[way]()
          byCount.set(count, {
            result,
            cpuUsPerCall: way === "direct" ? null : ((cpuSeconds(pid) - cpuBefore) * 1e6) / total,
            heardPerCall: heardBefore === null || heardAfter === null ? null : (heardAfter - heardBefore) / total
          })
          cells.push({ ...result, concurrency, way, notifications: count, cpuUsPerCall: byCount.get(count)!.cpuUsPerCall })
        }
        events?.close()
        events = undefined
        const zero = byCount.get(0)!
        const hundred = byCount.get(100)!
        const cost: ProgressCost = {
          concurrency,
          way,
          addedUsPerNotification: ((hundred.result.p50 - zero.result.p50) * 1000) / 100,
          cpuUsPerNotification: zero.cpuUsPerCall === null || hundred.cpuUsPerCall === null ? null : (hundred.cpuUsPerCall - zero.cpuUsPerCall) / 100,
          heardPerCall: hundred.heardPerCall
        }
        costs.push(cost)
        options.log(
          `  progress c=${String(concurrency).padEnd(3)} ${way.padEnd(17)} p50 ${zero.result.p50.toFixed(2)} ms (0) ${hundred.result.p50.toFixed(2)} ms (100): ` +
            `+${cost.addedUsPerNotification.toFixed(1)} us per notification` +
            (cost.cpuUsPerNotification !== null ? `, store CPU ${cost.cpuUsPerNotification.toFixed(1)} us per notification` : "") +
            (cost.heardPerCall !== null ? `; heard ${cost.heardPerCall.toFixed(1)} per call` : "") +
            (zero.result.errors + hundred.result.errors > 0 ? `  errors: ${zero.result.firstError ?? hundred.result.firstError}` : "")
        )
      }
    }

    // The floods: memory stays flat however many notifications arrive and however slowly they are read.
    const floods: ProgressFlood[] = []
    for (const way of ["store-mcp", "store-rest+events"] as const) {
      const stalled = way === "store-rest+events" ? await eventsSubscriber(store.url, true) : undefined
      const before = memoryMb(pid).rss
      const t0 = performance.now()
      await closedLoop(() => callers[way](options.floodCount), { concurrency: 4, calls: options.floodCalls, warmup: 0, maxSeconds: options.maxSeconds * 2 })
      const seconds = (performance.now() - t0) / 1000
      const after = memoryMb(pid)
      stalled?.close()
      const flood: ProgressFlood = { way, calls: options.floodCalls, notificationsPerCall: options.floodCount, seconds, rssBeforeMb: before, rssAfterMb: after.rss, peakMb: after.peak }
      floods.push(flood)
      options.log(
        `  flood ${way}: ${flood.calls} calls of ${flood.notificationsPerCall} notifications in ${seconds.toFixed(1)} s; ` +
          `store RSS ${before.toFixed(0)} -> ${after.rss.toFixed(0)} MB (peak ${after.peak.toFixed(0)} MB)`
      )
    }
    return { cells, costs, floods }
  } finally {
    for (const close of closers.reverse()) await close().catch(() => undefined)
  }
}

// Alone: builds the bundle and runs the cells.
if (process.argv[1]?.endsWith("progress.ts") === true) {
  const numbers = (v: string | undefined, d: ReadonlyArray<number>) => (v === undefined ? d : v.split(",").map(Number))
  buildStore()
  try {
    await runProgress(workFolder("mcp-store-bench-progress-"), {
      concurrencies: numbers(process.env.BENCH_CONCURRENCY, [1, 8]),
      calls: Number(process.env.BENCH_CALLS ?? 500),
      warmup: Number(process.env.BENCH_WARMUP ?? 100),
      maxSeconds: 60,
      floodCalls: 8,
      floodCount: Number(process.env.BENCH_FLOOD ?? 20_000),
      log: (line) => console.log(line)
    })
  } finally {
    await stopAll()
  }
}
