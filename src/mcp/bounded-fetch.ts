/**
 * A fetch whose response bodies are bounded, for the SDK's SSEClientTransport (legacy SSE
 * services). That transport reads its event stream through the `eventsource` package and its POST
 * answers through fetch, with no size limit anywhere: one endless event would be buffered until the
 * heap runs out. Both take the fetch given in the transport's options, so the limits go there:
 *
 * - an event stream: one event's data over `maxMessageBytes` (or a line that long) errors the body
 *   at once and cancels the download;
 * - any other successful answer: the whole body is one message, bounded the same way;
 * - an error answer (not 2xx): only its first `errorBodyBytes` are passed on, then the body ends.
 *
 * No redirect is followed (`redirect: "manual"`, and a 3xx answer fails the request): a service
 * cannot send the store's requests, and their headers, elsewhere. Limits are counted on the bytes as they arrive, before any decoding. `onTooLarge` is told when a
 * body was stopped: the owner closes the transport (the stream cannot be read past the message).
 */
import { MessageTooLargeError } from "./message-limit.js"

export interface BoundedFetchOptions {
  readonly maxMessageBytes: number
  /** How much of an error answer's body is passed on. */
  readonly errorBodyBytes: number
  /** Called once per body stopped by the limit. */
  readonly onTooLarge: (error: MessageTooLargeError) => void
  /** The fetch to wrap (the global one by default). */
  readonly fetch?: typeof fetch
}

/** What one chunk of a body becomes: the bytes passed on, and whether the body ends there. */
interface Step {
  readonly pass: Uint8Array
  readonly end: boolean
}

/** Looks at each chunk in turn; throws `MessageTooLargeError` to stop the body. */
type Meter = (chunk: Uint8Array) => Step

const LF = 10
const CR = 13

const NULL_BODY_STATUSES = new Set([101, 204, 205, 304])

/** The whole body is one message. */
const wholeBody = (max: number, what: string): Meter => {
  let total = 0
  return (chunk) => {
    total += chunk.length
    if (total > max) throw new MessageTooLargeError(what, max)
    return { pass: chunk, end: false }
  }
}

/** The first `max` bytes, then the end. */
const firstBytes = (max: number): Meter => {
  let left = max
  return (chunk) => {
    const pass = chunk.length <= left ? chunk : chunk.subarray(0, left)
    left -= pass.length
    return { pass, end: left === 0 }
  }
}

/**
 * An event stream: the data of one event (its `data:` values and the LFs joining them, as the
 * event source will hand it on) is at most `max` bytes. Events end at a blank line (LF, CR or
 * CRLF line ends); a line is counted as it arrives, so a line that never ends (data, a comment,
 * any field: the event source buffers them all) is stopped as well. Only line ends are searched
 * for; the first bytes of each line tell a data line.
 */
const eachEvent = (max: number): Meter => {
  /** Bytes of the event's data so far. */
  let held = 0
  let dataLines = 0
  /** Bytes of the line being read, and its first bytes (enough to see "data: "). */
  let lineBytes = 0
  let head = ""
  let afterCr = false
  const check = (pending: number) => {
    if (held + pending > max) throw new MessageTooLargeError("an event of the SSE stream", max)
  }
  /** How many bytes of the finished line are not its value, or -1 when it is no data line. */
  const dataPrefix = (): number => {
    if (head.startsWith("data:")) return head[5] === " " ? 6 : 5
    return head === "data" && lineBytes === 4 ? 4 : -1
  }
  return (chunk) => {
    let pos = 0
    while (pos < chunk.length) {
      const lf = chunk.indexOf(LF, pos)
      // A CR is looked for only before the next LF, so that each byte is searched once.
      const cr = chunk.subarray(pos, lf < 0 ? chunk.length : lf).indexOf(CR)
      const end = cr >= 0 ? pos + cr : lf
      const stop = end < 0 ? chunk.length : end
      if (stop > pos) {
        if (head.length < 6) head += Buffer.from(chunk.subarray(pos, Math.min(stop, pos + 6 - head.length))).toString("latin1")
        lineBytes += stop - pos
        afterCr = false
        // Counted before the line ends, less the longest prefix it may turn out to have.
        check((dataLines > 0 ? 1 : 0) + lineBytes - 6)
      }
      if (end < 0) break
      // The LF of a CRLF whose CR ended the previous line (maybe in the previous chunk).
      const crlfTail = afterCr && end === pos && chunk[end] === LF
      afterCr = chunk[end] === CR
      if (!crlfTail) {
        if (lineBytes === 0) {
          // A blank line: the event is complete.
          held = 0
          dataLines = 0
        } else {
          const prefix = dataPrefix()
          if (prefix >= 0) {
            held += (dataLines > 0 ? 1 : 0) + lineBytes - prefix
            dataLines += 1
            check(0)
          }
        }
        lineBytes = 0
        head = ""
      }
      pos = end + 1
    }
    return { pass: chunk, end: false }
  }
}

/** `body` seen through a meter; reading the result reads `body` one chunk at a time. */
const metered = (body: ReadableStream<Uint8Array>, meter: Meter, onTooLarge: (error: MessageTooLargeError) => void): ReadableStream<Uint8Array> => {
  const reader = body.getReader()
  const stop = (reason?: unknown) => void reader.cancel(reason).catch(() => undefined)
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const { done, value } = await reader.read()
      if (done) return controller.close()
      let step: Step
      try {
        step = meter(value)
      } catch (error) {
        stop(error)
        controller.error(error)
        if (error instanceof MessageTooLargeError) onTooLarge(error)
        return
      }
      if (step.pass.length > 0) controller.enqueue(step.pass)
      if (step.end) {
        stop()
        controller.close()
      }
    },
    cancel: (reason) => reader.cancel(reason)
  })
}

/** A fetch with the limits above on every response body. */
export const boundedFetch = (options: BoundedFetchOptions): typeof fetch => {
  const base = options.fetch ?? fetch
  return async (input, init) => {
    // Redirects are never followed: fetch is told not to (the event source asks it to), and a 3xx
    // fails the request, as the Streamable HTTP transport does (the SDK would follow it within the origin).
    const response = await base(input, { ...init, redirect: "manual" })
    if (response.status >= 300 && response.status < 400) {
      await response.body?.cancel().catch(() => undefined)
      const location = response.headers.get("location")
      throw new Error(`HTTP ${response.status}: the server redirects${location !== null ? ` to ${location.slice(0, 200)}` : ""}; redirects are not followed`)
    }
    // A null-body status (204, 304, ...) cannot be given a body again, and has none to bound.
    if (response.body === null || NULL_BODY_STATUSES.has(response.status)) return response
    const type = (response.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase()
    const meter = !response.ok
      ? firstBytes(options.errorBodyBytes)
      : type === "text/event-stream"
        ? eachEvent(options.maxMessageBytes)
        : wholeBody(options.maxMessageBytes, "the HTTP answer")
    return new Response(metered(response.body, meter, options.onTooLarge), {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers
    })
  }
}
