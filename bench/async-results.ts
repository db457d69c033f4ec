/**
 * What keeping finished asynchronous calls costs (src/records/async-results.ts, one store on its
 * file): the heap held by 10,000 finished calls, each with the answer of a small call_tool, the size
 * of their file, and how long one call's end takes to reach the disk with them all kept (the file is
 * one JSON document replaced atomically, so each end rewrites it whole; the ends of a burst share a
 * write). Run by hand: `node --expose-gc --import tsx bench/async-results.ts [count]`.
 */
import { mkdtempSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { AsyncResultsFile, asyncResultsFileFor, type AsyncCallEntry } from "../src/records/async-results.js"

const count = Number(process.argv[2] ?? 10_000)
const gc = (globalThis as { gc?: () => void }).gc
if (gc === undefined) throw new Error("run with node --expose-gc")

const heap = (): number => {
  gc()
  gc()
  return process.memoryUsage().heapUsed
}

/** A finished call as a small call_tool leaves it (about 700 bytes of JSON). */
const finished = (i: number): AsyncCallEntry => {
  const now = new Date().toISOString()
  const trace = i.toString(16).padStart(32, "0")
  return {
    call_id: `call_${i.toString(36).padStart(32, "_")}`,
    scope: "store",
    owner: "3q2x1yC8n0aK4mWlq9VZ7g",
    tool_name: "demo__add",
    service_name: "demo",
    original_name: "add",
    status: "completed",
    progress: { progress: 3, total: 3, message: null },
    started_at: now,
    ended_at: now,
    answer: {
      http_status: 200,
      body: {
        success: true,
        message: "Tool 'demo__add' called",
        result: String(i),
        content: [{ type: "text", text: String(i) }],
        structured_content: null,
        is_error: false,
        tool_name: "demo__add",
        original_name: "add",
        service_name: "demo",
        duration_ms: 5.07,
        trace_id: trace,
        span_id: trace.slice(0, 16),
        result_type: "complete"
      }
    },
    error: null,
    trace_id: trace
  }
}

const dir = mkdtempSync(join(tmpdir(), "mcp-store-async-bench-"))
const servicesFile = join(dir, "mcp.json")
try {
  const options = { maxFinished: count, retentionSeconds: 86_400, maxBytes: 1024 * 1024 * 1024 }
  const before = heap()
  const file = await AsyncResultsFile.open(servicesFile, options)
  // Kept in bursts: the ends of a burst share one write, as calls ending together do.
  for (let i = 0; i < count; i += 500) {
    const burst: Array<Promise<void>> = []
    for (let j = i; j < Math.min(count, i + 500); j++) burst.push(file.finish(finished(j)))
    await Promise.all(burst)
  }
  const held = heap() - before
  const bytes = statSync(asyncResultsFileFor(servicesFile)).size
  const times: number[] = []
  for (let k = 0; k < 20; k++) {
    const started = performance.now()
    await file.finish(finished(count + k))
    times.push(performance.now() - started)
  }
  times.sort((a, b) => a - b)
  const reopened = performance.now()
  const again = await AsyncResultsFile.open(servicesFile, options)
  const openMs = performance.now() - reopened
  await Promise.all([file.close(), again.close()])
  const mb = (n: number) => (n / 1024 / 1024).toFixed(1)
  process.stdout.write(
    [
      `finished calls kept: ${file.finishedCount()}`,
      `heap held: ${mb(held)} MB (${Math.round(held / count)} bytes a call)`,
      `file: ${mb(bytes)} MB`,
      `one end on disk with them all kept: p50 ${times[10]!.toFixed(1)} ms, max ${times[19]!.toFixed(1)} ms`,
      `open (read and check the file): ${openMs.toFixed(1)} ms`
    ].join("\n") + "\n"
  )
} finally {
  rmSync(dir, { recursive: true, force: true })
}
