/**
 * network_check: can these HTTP endpoints be reached from the store? Every endpoint is tried
 * concurrently with a 5 s limit; any HTTP answer counts as reachable (an MCP endpoint may answer
 * GET with 405).
 */
import { Effect } from "effect"
import { ValidationError, type FieldProblem } from "./errors.js"

export interface NetworkCheckResult {
  readonly endpoint_name: string
  readonly url: string
  readonly reachable: boolean
  /** healthy: answered under 1 s; warning: answered slower; error: no answer. */
  readonly status: "healthy" | "warning" | "error"
  readonly http_status: number | null
  readonly response_time_ms: number | null
  readonly error: string | null
  readonly checked_at: string
}

export const NETWORK_CHECK_LIMIT_MS = 5_000
const SLOW_MS = 1_000

/**
 * Checks each endpoint (a URL, or `{name, url}`) concurrently; refuses anything but http and https
 * URLs (a ValidationError, nothing probed). Interrupting the effect aborts the probes.
 */
export const networkCheck = (
  endpoints: ReadonlyArray<string | { readonly name: string; readonly url: string }>
): Effect.Effect<ReadonlyArray<NetworkCheckResult>, ValidationError> =>
  Effect.suspend(() => {
    const { targets, problems } = targetsOf(endpoints)
    return problems.length > 0
      ? Effect.fail(ValidationError.of(problems))
      : Effect.promise((signal) => Promise.all(targets.map((t) => checkOne(t.name, t.url, signal))))
  })

const targetsOf = (endpoints: ReadonlyArray<string | { readonly name: string; readonly url: string }>) => {
  const problems: FieldProblem[] = []
  const targets = endpoints.map((e, i) => {
    const url = typeof e === "string" ? e : e.url
    let parsed: URL | undefined
    try {
      parsed = new URL(url)
    } catch {
      problems.push({ field: `endpoints.${i}`, problem: "is not a valid URL" })
    }
    if (parsed && parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      problems.push({ field: `endpoints.${i}`, problem: "only http and https URLs are allowed" })
    }
    return { name: typeof e === "string" ? url : e.name, url }
  })
  return { targets, problems }
}

const checkOne = async (name: string, url: string, signal?: AbortSignal): Promise<NetworkCheckResult> => {
  const started = performance.now()
  const checked_at = new Date().toISOString()
  const limit = AbortSignal.timeout(NETWORK_CHECK_LIMIT_MS)
  try {
    const response = await fetch(url, {
      method: "GET",
      redirect: "manual",
      signal: signal ? AbortSignal.any([signal, limit]) : limit
    })
    const ms = performance.now() - started
    await response.body?.cancel().catch(() => undefined)
    return {
      endpoint_name: name,
      url,
      reachable: true,
      status: ms < SLOW_MS ? "healthy" : "warning",
      http_status: response.status,
      response_time_ms: Math.round(ms * 100) / 100,
      error: null,
      checked_at
    }
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause
    const error = limit.aborted
      ? `no answer within ${NETWORK_CHECK_LIMIT_MS / 1000} s`
      : (cause?.code ?? cause?.message ?? (e instanceof Error ? e.message : String(e)))
    return {
      endpoint_name: name,
      url,
      reachable: false,
      status: "error",
      http_status: null,
      response_time_ms: null,
      error,
      checked_at
    }
  }
}
