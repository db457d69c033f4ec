/**
 * Load without loss: a bounded soak of mcp-store running as a child process
 * (`node scripts/dev.mjs run api`). Eight concurrent clients send a mix of tool calls, lists and
 * waits; a local upstream (the stdio fixture) is killed with SIGKILL now and then, and the store
 * must bring it back by itself. At the end it checks that:
 *   - every request was answered with a success or a contract error (counted by status and code);
 *   - the tool-record count (GET /for_store/tool_records?scope=all `total`, and the lines of
 *     tool_records.jsonl) equals the number of call_tool requests made;
 *   - the store's memory (RSS from /proc every 5 s) does not keep growing (first, last, max, slope).
 *
 *   npx tsx bench/soak.ts                 # 2 minutes
 *   SOAK_SECONDS=60 npx tsx bench/soak.ts # or any duration; SOAK_CLIENTS (8), SOAK_KILL_SECONDS (10)
 *
 * Prints a summary table; exits with 1 when a check fails.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { setTimeout as sleep } from "node:timers/promises"
import { startHttpFixture } from "../test/fixtures/http-fixture.js"
import { stdioFixture } from "../test/fixtures/paths.js"
import { childrenOf, rssOf, spawnStore } from "../test/support/process.js"
import { openSse } from "../test/support/sse.js"

const SECONDS = Number(process.env.SOAK_SECONDS ?? 120)
const CLIENTS = Number(process.env.SOAK_CLIENTS ?? 8)
const KILL_EVERY_MS = Number(process.env.SOAK_KILL_SECONDS ?? 10) * 1000
const SAMPLE_EVERY_MS = 5_000
/** Answers a client may get: a success, or one of the contract's error statuses. */
const CONTRACT_STATUSES = new Set([200, 400, 404, 408, 502, 503, 504])

type Kind = "call_tool" | "agent_call_tool" | "list_services" | "list_tools" | "get_stats" | "tool_records" | "realtime_status" | "wait_service"

interface Tally {
  count: number
  byAnswer: Map<string, number>
  latencies: number[]
}

const tallies = new Map<Kind, Tally>()
const tally = (kind: Kind): Tally => {
  let t = tallies.get(kind)
  if (t === undefined) tallies.set(kind, (t = { count: 0, byAnswer: new Map(), latencies: [] }))
  return t
}
const unexpected: string[] = []
let callToolRequests = 0

const pick = <T>(items: ReadonlyArray<readonly [T, number]>): T => {
  const total = items.reduce((n, [, w]) => n + w, 0)
  let r = Math.random() * total
  for (const [item, w] of items) if ((r -= w) < 0) return item
  return items[items.length - 1]![0]
}

const percentile = (values: number[], p: number) => {
  if (values.length === 0) return 0
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}

/** Least-squares slope of (t seconds, y) in y-units per minute. */
const slopePerMinute = (points: ReadonlyArray<readonly [number, number]>) => {
  const n = points.length
  if (n < 2) return 0
  const mx = points.reduce((s, [x]) => s + x, 0) / n
  const my = points.reduce((s, [, y]) => s + y, 0) / n
  const num = points.reduce((s, [x, y]) => s + (x - mx) * (y - my), 0)
  const den = points.reduce((s, [x]) => s + (x - mx) ** 2, 0)
  return den === 0 ? 0 : (num / den) * 60
}

const MB = 1024 * 1024
const mb = (bytes: number) => `${(bytes / MB).toFixed(1)} MB`

async function main(): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-soak-"))
  const file = join(dir, "mcp.json")
  const remote = await startHttpFixture()
  const proc = stdioFixture("--name", "soak-proc")
  writeFileSync(
    file,
    JSON.stringify({
      mcpServers: { proc: { command: proc.command, args: proc.args }, remote: { url: remote.url } },
      agents: { a1: { mcpServers: { remote: { url: remote.url } } } }
    })
  )
  const store = await spawnStore({
    configFile: file,
    monitoring: { health_check_seconds: 1, reconnection_seconds: 1, ping_timeout_seconds: 2, initialization_timeout_seconds: 15 },
    // No size limit: the record count must equal the calls made.
    extraArgs: ["--tool-record-max-file-size=-1"]
  })
  const base = store.url
  let failed = false
  try {
    for (const [prefix, name] of [["/for_store", "proc"], ["/for_store", "remote"], ["/for_agent/a1", "remote"]] as const) {
      const ready = await store.post(`${prefix}/wait_service`, { client_id_or_service_name: name, status: "healthy", timeout: 30 })
      if (ready.body?.data?.result !== true) throw new Error(`${prefix} ${name} did not become healthy: ${ready.text}`)
    }
    const events = await openSse(`${base}/events`)

    const started = performance.now()
    const deadline = started + SECONDS * 1000
    const memory: Array<readonly [number, number]> = []
    const heap: Array<readonly [number, number]> = []
    const sampleMemory = () => {
      const at = (performance.now() - started) / 1000
      const rss = rssOf(store.pid)
      if (rss !== undefined) memory.push([at, rss])
      // The V8 heap as the store reports it (not counted as load).
      void fetch(`${base}/monitoring/resource_usage`).then(
        async (r) => {
          const used = ((await r.json()) as { process?: { heap_used?: number } }).process?.heap_used
          if (typeof used === "number") heap.push([at, used])
        },
        () => undefined
      )
    }
    sampleMemory()
    const sampler = setInterval(sampleMemory, SAMPLE_EVERY_MS)

    // The killer: SIGKILL to the stdio fixture every KILL_EVERY_MS; time until the store has it healthy again.
    const recoveries: number[] = []
    let kills = 0
    const killer = (async () => {
      while (performance.now() + KILL_EVERY_MS < deadline) {
        await sleep(KILL_EVERY_MS)
        const victim = childrenOf(store.pid).find((pid) => {
          try {
            return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("soak-proc")
          } catch {
            return false
          }
        })
        if (victim === undefined) continue
        process.kill(victim, "SIGKILL")
        kills += 1
        const killedAt = performance.now()
        for (;;) {
          await sleep(100)
          const status = await fetch(`${base}/for_store/service_status/proc`).then((r) => r.json() as Promise<{ status?: string }>, () => ({ status: undefined }))
          if (status.status === "healthy" && performance.now() - killedAt > 200) break
          if (performance.now() - killedAt > 30_000) {
            unexpected.push(`proc not healthy 30 s after kill #${kills}`)
            break
          }
        }
        recoveries.push(performance.now() - killedAt)
      }
    })()

    const send = async (kind: Kind, method: string, path: string, body?: unknown) => {
      const t = tally(kind)
      const t0 = performance.now()
      let answer: string
      try {
        const res = await fetch(base + path, {
          method,
          ...(body !== undefined ? { body: JSON.stringify(body), headers: { "content-type": "application/json" } } : {}),
          signal: AbortSignal.timeout(60_000)
        })
        const text = await res.text()
        let json: { success?: boolean; error?: { code?: string } } | undefined
        try {
          json = JSON.parse(text)
        } catch {
          json = undefined
        }
        if (res.status === 200) answer = json?.success === false ? "200 success:false" : "200"
        else answer = `${res.status} ${json?.error?.code ?? "(no contract body)"}`
        if (!CONTRACT_STATUSES.has(res.status) || (res.status !== 200 && json?.error?.code === undefined)) {
          unexpected.push(`${kind}: ${answer} ${text.slice(0, 200)}`)
        }
      } catch (e) {
        answer = `no answer (${(e as Error).message})`
        unexpected.push(`${kind}: ${answer}`)
      }
      t.count += 1
      t.latencies.push(performance.now() - t0)
      t.byAnswer.set(answer, (t.byAnswer.get(answer) ?? 0) + 1)
    }

    const client = async () => {
      while (performance.now() < deadline) {
        const kind = pick<Kind>([
          ["call_tool", 45],
          ["agent_call_tool", 10],
          ["list_services", 8],
          ["list_tools", 8],
          ["get_stats", 5],
          ["tool_records", 5],
          ["realtime_status", 4],
          ["wait_service", 15]
        ])
        switch (kind) {
          case "call_tool": {
            callToolRequests += 1
            const call = pick<{ tool_name: string; args: Record<string, unknown> }>([
              [{ tool_name: "proc__echo", args: { text: "soak" } }, 4],
              [{ tool_name: "proc__add", args: { a: 2, b: 3 } }, 2],
              [{ tool_name: "proc__fail", args: {} }, 1],
              [{ tool_name: "remote__echo", args: { text: "soak" } }, 3],
              [{ tool_name: "remote__sleep", args: { ms: 20 } }, 1],
              [{ tool_name: "remote__add", args: { a: "not a number", b: 1 } }, 1]
            ])
            await send(kind, "POST", "/for_store/call_tool", { ...call, timeout: 10 })
            break
          }
          case "agent_call_tool":
            callToolRequests += 1
            await send(kind, "POST", "/for_agent/a1/call_tool", { tool_name: "remote__echo", args: { text: "agent" }, timeout: 10 })
            break
          case "list_services":
            await send(kind, "GET", "/for_store/list_services?scope=all")
            break
          case "list_tools":
            await send(kind, "GET", "/for_store/list_tools")
            break
          case "get_stats":
            await send(kind, "GET", "/for_store/get_stats")
            break
          case "tool_records":
            await send(kind, "GET", "/for_store/tool_records?limit=5&scope=all")
            break
          case "realtime_status":
            await send(kind, "GET", "/monitoring/realtime_status")
            break
          case "wait_service":
            await send(kind, "POST", "/for_store/wait_service", {
              client_id_or_service_name: Math.random() < 0.5 ? "proc" : "remote",
              status: "healthy",
              timeout: 2
            })
            break
        }
      }
    }

    await Promise.all([...Array.from({ length: CLIENTS }, client), killer])
    clearInterval(sampler)
    sampleMemory()
    const elapsed = (performance.now() - started) / 1000

    // Records: the API's total and the file's lines.
    const records = await store.get("/for_store/tool_records?scope=all&limit=1")
    const apiTotal = Number(records.body?.total)
    const summaryTotal = Number(records.body?.summary?.total_executions)
    const fileLines = readFileSync(join(dir, "tool_records.jsonl"), "utf8").split("\n").filter((l) => l.trim() !== "").length
    events.close()

    // SIGTERM and time to exit.
    const termAt = performance.now()
    store.child.kill("SIGTERM")
    const exit = await Promise.race([store.exited, sleep(10_000).then(() => undefined)])
    const exitMs = exit === undefined ? undefined : exit.at - termAt

    // ---------------------------------------------------------------------------------------
    const lines: string[] = []
    const row = (...cells: Array<string | number>) => lines.push(cells.map((c, i) => (i === 0 ? String(c).padEnd(18) : String(c).padStart(9))).join(" "))
    lines.push(`mcp-store soak: ${elapsed.toFixed(0)} s, ${CLIENTS} clients, stdio upstream SIGKILLed every ${KILL_EVERY_MS / 1000} s`)
    lines.push("")
    row("request", "count", "req/s", "p50 ms", "p95 ms", "p99 ms")
    let total = 0
    for (const [kind, t] of [...tallies].sort((a, b) => b[1].count - a[1].count)) {
      total += t.count
      row(kind, t.count, (t.count / elapsed).toFixed(1), percentile(t.latencies, 50).toFixed(1), percentile(t.latencies, 95).toFixed(1), percentile(t.latencies, 99).toFixed(1))
    }
    row("all", total, (total / elapsed).toFixed(1))
    lines.push("")
    lines.push("answers (status and error code) per request kind:")
    for (const [kind, t] of tallies) {
      lines.push(`  ${kind.padEnd(16)} ${[...t.byAnswer].sort((a, b) => b[1] - a[1]).map(([a, n]) => `${a}: ${n}`).join(", ")}`)
    }
    lines.push("")
    const lost = callToolRequests - apiTotal
    lines.push(
      `call_tool requests made: ${callToolRequests}; tool records: ${apiTotal} (tool_records total), ${summaryTotal} (summary.total_executions), ` +
        `${fileLines} (file lines); lost: ${lost} by the API total, ${callToolRequests - fileLines} in the file`
    )
    lines.push(`upstream kills: ${kills}; back to healthy after ${recoveries.map((ms) => `${(ms / 1000).toFixed(1)} s`).join(", ") || "-"}`)
    lines.push(`event stream: ${events.events.length} events received`)
    const rss = memory.map(([, y]) => y)
    const warm = memory.filter(([t]) => t >= Math.min(20, elapsed / 4))
    const secondHalf = memory.filter(([t]) => t >= elapsed / 2)
    const slopeAll = slopePerMinute(warm)
    const slopeLate = slopePerMinute(secondHalf)
    lines.push(
      `store RSS (${memory.length} samples, every ${SAMPLE_EVERY_MS / 1000} s): first ${mb(rss[0] ?? 0)}, last ${mb(rss.at(-1) ?? 0)}, max ${mb(Math.max(...rss))}; ` +
        `slope after warm-up ${(slopeAll / MB).toFixed(2)} MB/min, over the second half ${(slopeLate / MB).toFixed(2)} MB/min`
    )
    lines.push(`  RSS series (MB): ${rss.map((y) => (y / MB).toFixed(0)).join(" ")}`)
    const heapUsed = heap.map(([, y]) => y)
    lines.push(`  heap series (MB): ${heapUsed.map((y) => (y / MB).toFixed(0)).join(" ")}`)
    lines.push(
      `store heap used (${heap.length} samples): first ${mb(heapUsed[0] ?? 0)}, last ${mb(heapUsed.at(-1) ?? 0)}, max ${mb(Math.max(...heapUsed))}; ` +
        `slope over the second half ${(slopePerMinute(heap.filter(([t]) => t >= elapsed / 2)) / MB).toFixed(2)} MB/min`
    )
    lines.push(`SIGTERM to exit: ${exitMs === undefined ? "did not exit within 10 s" : `${Math.round(exitMs)} ms (code ${exit?.code})`}`)

    // Checks.
    const third = (series: ReadonlyArray<readonly [number, number]>, i: number) =>
      series.filter(([t]) => t >= (i * elapsed) / 3 && t <= ((i + 1) * elapsed) / 3 + 1).map(([, y]) => y)
    const thirdMax = (series: ReadonlyArray<readonly [number, number]>, i: number) => Math.max(0, ...third(series, i))
    const thirdMin = (series: ReadonlyArray<readonly [number, number]>, i: number) => Math.min(Number.MAX_SAFE_INTEGER, ...third(series, i))
    const checks: Array<[string, boolean]> = [
      [`every request answered with a success or a contract error (${unexpected.length} not)`, unexpected.length === 0],
      [`records in the file = call_tool requests (${fileLines} vs ${callToolRequests})`, fileLines === callToolRequests && summaryTotal === callToolRequests],
      [`tool_records total = call_tool requests (${apiTotal} vs ${callToolRequests})`, apiTotal === callToolRequests],
      // "Does not keep growing": RSS alone misleads here (V8 grows its heap lazily while the heap is
      // collected: 100 -> 340 -> 150 MB), so it fails only when the RSS of the last third tops the
      // middle third's by 10 % AND the heap's low point rises by over 20 % + 16 MB as well.
      [
        `memory does not keep growing (RSS max: middle third ${mb(thirdMax(memory, 1))}, last third ${mb(thirdMax(memory, 2))}; ` +
          `heap low: middle third ${mb(thirdMin(heap, 1))}, last third ${mb(thirdMin(heap, 2))})`,
        !(thirdMax(memory, 2) > 1.1 * thirdMax(memory, 1) && thirdMin(heap, 2) > 1.2 * thirdMin(heap, 1) + 16 * MB)
      ],
      ["the upstream came back after every kill", recoveries.length === kills && recoveries.every((ms) => ms < 30_000)],
      ["exits within 5 s of SIGTERM", exitMs !== undefined && exitMs < 5_000]
    ]
    lines.push("")
    for (const [label, ok] of checks) lines.push(`${ok ? "PASS" : "FAIL"}  ${label}`)
    if (unexpected.length > 0) lines.push(...unexpected.slice(0, 10).map((u) => `  unexpected: ${u}`))
    console.log(lines.join("\n"))
    failed = checks.some(([, ok]) => !ok)
  } finally {
    await store.kill()
    await remote.stop()
    rmSync(dir, { recursive: true, force: true })
  }
  return failed ? 1 : 0
}

process.exitCode = await main()
