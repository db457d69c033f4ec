/**
 * Load generation and statistics: a keep-alive JSON-over-HTTP client (node:http Agent, one socket
 * per concurrent caller), a closed-loop runner (C callers, each sending its next call as soon as the
 * previous one answered, a warm-up first, bounded in calls and in time), percentiles, and the
 * count of the warnings an in-process SDK client draws under load.
 */
import { Agent, request } from "node:http"

/**
 * An MCP SDK client in the benchmark's process makes Node's fetch add an abort listener per request
 * to its transport's one AbortSignal, removed only when the request is garbage-collected: Node warns
 * once past 1500 listeners, and again for each one more. From now on those warnings are counted
 * instead of printed (others still are); the function answers the count so far.
 */
export const countAbortListenerWarnings = (): (() => number) => {
  let count = 0
  process.removeAllListeners("warning")
  process.on("warning", (w) => {
    if (w.name === "MaxListenersExceededWarning") count++
    else process.stderr.write(`${w.name}: ${w.message}\n`)
  })
  return () => count
}

/** Nearest-rank percentile of an ascending array. */
export const percentile = (sorted: ReadonlyArray<number>, p: number): number =>
  sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!

export interface Latencies {
  readonly count: number
  readonly p50: number
  readonly p95: number
  readonly p99: number
  readonly max: number
  readonly mean: number
}

export const summarize = (values: ReadonlyArray<number>): Latencies => {
  const sorted = [...values].sort((a, b) => a - b)
  return {
    count: sorted.length,
    p50: percentile(sorted, 50),
    p95: percentile(sorted, 95),
    p99: percentile(sorted, 99),
    max: sorted[sorted.length - 1] ?? NaN,
    mean: sorted.reduce((a, b) => a + b, 0) / Math.max(1, sorted.length)
  }
}

/** A response: status and parsed JSON body (undefined when the body is not JSON). */
export interface JsonResponse {
  readonly status: number
  readonly body: unknown
  readonly text: string
}

/** A keep-alive HTTP client for one origin. */
export class HttpClient {
  private readonly agent: Agent
  private readonly host: string
  private readonly port: number

  constructor(baseUrl: string, maxSockets = 256) {
    const u = new URL(baseUrl)
    this.host = u.hostname
    this.port = Number(u.port)
    this.agent = new Agent({ keepAlive: true, maxSockets, maxFreeSockets: maxSockets })
  }

  /** Sends a request; rejects on a network error or after `timeoutMs`. */
  send(method: string, path: string, body?: unknown, timeoutMs = 30_000): Promise<JsonResponse> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body))
    return new Promise((resolve, reject) => {
      const req = request(
        {
          host: this.host,
          port: this.port,
          method,
          path,
          agent: this.agent,
          headers: payload ? { "content-type": "application/json", "content-length": payload.length } : {}
        },
        (res) => {
          const chunks: Buffer[] = []
          res.on("data", (c: Buffer) => chunks.push(c))
          res.on("end", () => {
            const text = Buffer.concat(chunks).toString("utf8")
            let parsed: unknown
            try {
              parsed = text.length > 0 ? JSON.parse(text) : undefined
            } catch {
              parsed = undefined
            }
            resolve({ status: res.statusCode ?? 0, body: parsed, text })
          })
          res.on("error", reject)
        }
      )
      req.setTimeout(timeoutMs, () => req.destroy(new Error(`${method} ${path}: no answer within ${timeoutMs} ms`)))
      req.on("error", reject)
      req.end(payload)
    })
  }

  get(path: string, timeoutMs?: number): Promise<JsonResponse> {
    return this.send("GET", path, undefined, timeoutMs)
  }

  post(path: string, body: unknown, timeoutMs?: number): Promise<JsonResponse> {
    return this.send("POST", path, body, timeoutMs)
  }

  close(): void {
    this.agent.destroy()
  }
}

/** One closed-loop run's figures. */
export interface RunResult extends Latencies {
  /** Completed calls per second over the measured phase. */
  readonly rate: number
  readonly errors: number
  readonly seconds: number
  /** The first error message, if any. */
  readonly firstError: string | null
  /** True when the time limit cut the run short. */
  readonly cut: boolean
}

/**
 * Runs `call(i)` with `concurrency` callers: `warmup` calls first (not measured), then `calls`
 * measured calls, each with a distinct index. A call that throws counts as an error. The measured
 * phase stops early after `maxSeconds`.
 */
export const closedLoop = async (
  call: (i: number) => Promise<void>,
  options: { concurrency: number; calls: number; warmup: number; maxSeconds: number; firstIndex?: number }
): Promise<RunResult> => {
  let index = options.firstIndex ?? 0
  const phase = async (count: number, latencies: number[] | undefined, deadline: number) => {
    let issued = 0
    let errors = 0
    let firstError: string | null = null
    const worker = async () => {
      while (issued < count && performance.now() < deadline) {
        issued++
        const i = index++
        const started = performance.now()
        try {
          await call(i)
          latencies?.push(performance.now() - started)
        } catch (e) {
          errors++
          firstError ??= e instanceof Error ? e.message : String(e)
        }
      }
    }
    await Promise.all(Array.from({ length: options.concurrency }, worker))
    return { errors, firstError, cut: issued < count }
  }
  await phase(options.warmup, undefined, performance.now() + options.maxSeconds * 1000)
  const latencies: number[] = []
  const started = performance.now()
  const { errors, firstError, cut } = await phase(options.calls, latencies, started + options.maxSeconds * 1000)
  const seconds = (performance.now() - started) / 1000
  return { ...summarize(latencies), rate: latencies.length / seconds, errors, seconds, firstError, cut }
}
