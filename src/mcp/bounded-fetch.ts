/**
 * A fetch whose response bodies are bounded, for the SDK's SSEClientTransport (legacy SSE
 * services). That transport reads its event stream through the `eventsource` package and its POST
 * answers through fetch, with no size limit anywhere: one endless event would be buffered until the
 * heap runs out. Both take the fetch given in the transport's options, so the limits go there:
 *
 * - an event stream: one event (the bytes between two blank lines) over `maxMessageBytes` errors
 *   the body at once and cancels the download;
 * - any other successful answer: the whole body is one message, bounded the same way;
 * - an error answer (not 2xx): only its first `errorBodyBytes` are passed on, then the body ends.
 *
 * Limits are counted on the bytes as they arrive, before any decoding. `onTooLarge` is told when a
 * body was stopped: the owner closes the transport (the stream cannot be read past the message).
 */
import { MessageTooLargeError } from "./types.js"

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
 * An event stream: the bytes of one event, from the end of the last one (a blank line: LF, CR or
 * CRLF right after a line end) to the next, are at most `max`. Only line ends are searched for.
 */
const eachEvent = (max: number): Meter => {
  let held = 0
  let atLineStart = true
  let afterCr = false
  const add = (bytes: number) => {
    held += bytes
    if (held > max) throw new MessageTooLargeError("an event of the SSE stream", max)
  }
  return (chunk) => {
    let pos = 0
    while (pos < chunk.length) {
      const lf = chunk.indexOf(LF, pos)
      // A CR is looked for only before the next LF, so that each byte is searched once.
      const cr = chunk.subarray(pos, lf < 0 ? chunk.length : lf).indexOf(CR)
      const end = cr >= 0 ? pos + cr : lf
      if (end < 0) {
        add(chunk.length - pos)
        atLineStart = false
        afterCr = false
        break
      }
      // The LF of a CRLF whose CR ended the previous line (maybe in the previous chunk).
      const crlfTail = afterCr && end === pos && chunk[end] === LF
      afterCr = chunk[end] === CR
      if (!crlfTail) {
        if (atLineStart && end === pos) held = 0 // a blank line: the event is complete
        else add(end - pos + 1)
        atLineStart = true
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
    const response = await base(input, init)
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
