/**
 * W3C trace context (`traceparent`, `tracestate`, `baggage`) for tool calls: read from a caller (HTTP
 * headers on REST, a request's `_meta` on MCP), continued by the store as one span of the trace, and
 * passed to the upstream in the call's `_meta`, so a call can be followed from the agent through the
 * store to the server. The store's records and answers carry the trace id and the store's span id.
 *
 * A caller's context that is not valid is ignored (the call starts a trace of its own), as the W3C
 * recommendation asks of a participant: bad trace context never fails a call.
 */
import { randomBytes } from "node:crypto"

/** A call's trace context as the store carries it. */
export interface TraceContext {
  /** 32 lowercase hex digits, not all zero. */
  readonly traceId: string
  /** The span that is the parent of the next hop: 16 lowercase hex digits, not all zero. */
  readonly spanId: string
  /** The span this one continues (the caller's, or the store's request span); undefined: the trace's first span. */
  readonly parentSpanId?: string | undefined
  /** Two hex digits (`01`: sampled). */
  readonly flags: string
  /** The vendors' state, passed on unchanged (at most 512 characters). */
  readonly tracestate?: string | undefined
  /** The caller's baggage, passed on unchanged (at most 8,192 characters). */
  readonly baggage?: string | undefined
}

/** The `_meta` keys (and HTTP header names) of trace context. */
export const TRACE_KEYS = ["traceparent", "tracestate", "baggage"] as const

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/
const ZERO_TRACE = "0".repeat(32)
const ZERO_SPAN = "0".repeat(16)
const MAX_TRACESTATE = 512
const MAX_BAGGAGE = 8_192
/** Printable ASCII without control characters: what a header value may carry through. */
const HEADER_TEXT = /^[\x20-\x7e]*$/

/** A header or `_meta` value as one string: a list (repeated headers) is joined as HTTP joins them. */
const oneValue = (value: unknown): string | undefined =>
  typeof value === "string" ? value : Array.isArray(value) && value.every((v) => typeof v === "string") ? value.join(",") : undefined

/** `tracestate` or `baggage` kept when it is printable and within its bound, else dropped. */
const bounded = (value: unknown, max: number): string | undefined => {
  const text = oneValue(value)?.trim()
  return text !== undefined && text.length > 0 && text.length <= max && HEADER_TEXT.test(text) ? text : undefined
}

/**
 * The caller's trace context from its `traceparent`, `tracestate` and `baggage` (header values or
 * `_meta` values); undefined when `traceparent` is missing or not valid (version `ff`, an all-zero id,
 * a version 00 header with more fields). A later version's extra fields are ignored, as the
 * recommendation says.
 */
export const readTraceContext = (source: { readonly [key: string]: unknown } | undefined): TraceContext | undefined => {
  if (source === undefined) return undefined
  const parent = oneValue(source["traceparent"])?.trim()
  const match = parent === undefined ? null : TRACEPARENT.exec(parent)
  if (match === null) return undefined
  const [, version, traceId, spanId, flags, rest] = match as unknown as [string, string, string, string, string, string | undefined]
  if (version === "ff" || (version === "00" && rest !== undefined) || traceId === ZERO_TRACE || spanId === ZERO_SPAN) return undefined
  const tracestate = bounded(source["tracestate"], MAX_TRACESTATE)
  const baggage = bounded(source["baggage"], MAX_BAGGAGE)
  return { traceId, spanId, flags, ...(tracestate === undefined ? {} : { tracestate }), ...(baggage === undefined ? {} : { baggage }) }
}

/**
 * `bytes` random bytes as hex digits, taken from a batch of random bytes (as node:crypto's
 * randomUUID does): one call into OpenSSL per 170 calls instead of two per call.
 */
let pool = Buffer.alloc(0)
let at = 0
const randomHex = (bytes: number): string => {
  if (at + bytes > pool.length) {
    pool = randomBytes(4096)
    at = 0
  }
  at += bytes
  return pool.toString("hex", at - bytes, at)
}

/**
 * The store's span of a call: in the caller's trace when it sent one (its state and baggage kept),
 * else the first span of a new, sampled trace.
 */
export const callSpan = (caller: TraceContext | undefined): TraceContext => {
  const spanId = randomHex(8)
  if (caller === undefined) return { traceId: randomHex(16), spanId, flags: "01" }
  return { ...caller, spanId, parentSpanId: caller.spanId }
}

/** A new span id (16 hex digits), from the same batch of random bytes as the calls' spans. */
export const newSpanId = (): string => randomHex(8)

/** `traceMeta` of a trace context read from `source`; undefined when it has none that is valid. */
export const traceMetaOf = (source: { readonly [key: string]: unknown } | undefined): Record<string, string> | undefined => {
  const context = readTraceContext(source)
  return context === undefined ? undefined : traceMeta(context)
}

/** The `_meta` entries that carry a span's context to the next hop (the upstream). */
export const traceMeta = (span: TraceContext): Record<string, string> => {
  const meta: Record<string, string> = { traceparent: `00-${span.traceId}-${span.spanId}-${span.flags}` }
  if (span.tracestate !== undefined) meta["tracestate"] = span.tracestate
  if (span.baggage !== undefined) meta["baggage"] = span.baggage
  return meta
}
