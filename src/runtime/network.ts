/**
 * network_check: can these HTTP endpoints be reached from the store? Every endpoint is tried
 * concurrently with a 5 s limit; any HTTP answer counts as reachable (an MCP endpoint may answer
 * GET with 405).
 *
 * Not an open prober: a caller not allowed everything may only name URLs of services registered in
 * its scope (`registered`), and the store's outbound policy (src/mcp/upstream-policy.ts: metadata
 * addresses, `--upstream-allow`) applies to every probe. No redirect is followed, no body is read,
 * and a URL's secrets are masked in the answer.
 */
import { Effect } from "effect"
import { maskUrl } from "../domain/secrets.js"
import { DEFAULT_UPSTREAM_POLICY, type UpstreamPolicy } from "../mcp/upstream-policy.js"
import { ValidationError, type FieldProblem } from "../domain/errors.js"

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
  endpoints: ReadonlyArray<string | { readonly name: string; readonly url: string }>,
  guard: {
    /** The URLs the caller may probe; undefined: any (a caller allowed everything). */
    readonly registered?: ReadonlySet<string> | undefined
    readonly policy?: UpstreamPolicy | undefined
  } = {}
): Effect.Effect<ReadonlyArray<NetworkCheckResult>, ValidationError> =>
  Effect.suspend(() => {
    const { targets, problems } = targetsOf(endpoints)
    if (guard.registered !== undefined) {
      targets.forEach((t, i) => {
        if (!guard.registered!.has(t.url)) problems.push({ field: `endpoints.${i}`, problem: "is not the URL of a service of this scope (only an admin may probe other URLs)" })
      })
    }
    const policy = guard.policy ?? DEFAULT_UPSTREAM_POLICY
    return problems.length > 0
      ? Effect.fail(ValidationError.of(problems))
      : Effect.promise((signal) => Promise.all(targets.map((t) => checkOne(t.name, t.url, policy, signal))))
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

const checkOne = async (name: string, url: string, policy: UpstreamPolicy, signal?: AbortSignal): Promise<NetworkCheckResult> => {
  const started = performance.now()
  const checked_at = new Date().toISOString()
  const limit = AbortSignal.timeout(NETWORK_CHECK_LIMIT_MS)
  const shown = { endpoint_name: maskUrl(name), url: maskUrl(url) }
  try {
    await policy.checkResolved(new URL(url))
    const response = await fetch(url, {
      method: "GET",
      redirect: "manual",
      signal: signal ? AbortSignal.any([signal, limit]) : limit
    })
    const ms = performance.now() - started
    await response.body?.cancel().catch(() => undefined)
    return {
      ...shown,
      reachable: true,
      status: ms < SLOW_MS ? "healthy" : "warning",
      http_status: response.status,
      response_time_ms: Math.round(ms * 100) / 100,
      error: null,
      checked_at
    }
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause
    const error = (e as { _tag?: string })._tag === "UpstreamRefused"
      ? (e as Error).message
      : limit.aborted
      ? `no answer within ${NETWORK_CHECK_LIMIT_MS / 1000} s`
      : (cause?.code ?? cause?.message ?? (e instanceof Error ? e.message : String(e)))
    return {
      ...shown,
      reachable: false,
      status: "error",
      http_status: null,
      response_time_ms: null,
      error,
      checked_at
    }
  }
}
