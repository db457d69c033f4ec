/**
 * A Server-Sent Events reader over fetch for the store's streams (/events, /inspect/events): every
 * event and comment as it arrives, and waits on them (the first event that matches, a condition
 * over the events so far) bounded by a time-out.
 */
import { within } from "./wait.js"

/** One Server-Sent Event. */
export interface SseEvent {
  readonly id: string | undefined
  readonly event: string
  readonly data: string
  /** `data` parsed as JSON (undefined when it is not JSON). */
  readonly json: any
}

/** An open SSE stream read with fetch. */
export interface SseStream {
  readonly status: number
  readonly headers: Headers
  /** Every event so far, in order. */
  readonly events: SseEvent[]
  /** Every comment line so far (without the leading colon). */
  readonly comments: string[]
  /** The raw text so far. */
  text(): string
  /** The first event (already received or to come) that matches, within `ms`. */
  waitFor(match: (e: SseEvent) => boolean, ms: number, label?: string): Promise<SseEvent>
  /** Waits until `check` holds over the events received so far, within `ms`. */
  until(check: (events: ReadonlyArray<SseEvent>) => boolean, ms: number, label?: string): Promise<void>
  /** Resolves with "end" (the server ended the body) or "error" (the connection broke) once reading stops. */
  readonly ended: Promise<"end" | "error" | "aborted">
  /** Aborts the request (the client goes away). */
  close(): void
}

/**
 * Opens an SSE stream with fetch and parses it as it arrives (id/event/data lines, comments,
 * blank-line dispatch). Resolves once the response headers are in; a non-200 answer is returned
 * with its body read into `text()` and no events.
 */
export const openSse = async (url: string, headers: Record<string, string> = {}): Promise<SseStream> => {
  const controller = new AbortController()
  const res = await within(fetch(url, { headers: { accept: "text/event-stream", ...headers }, signal: controller.signal }), 10_000, `GET ${url}`)
  const events: SseEvent[] = []
  const comments: string[] = []
  let raw = ""
  const listeners = new Set<() => void>()
  const notify = () => {
    for (const l of [...listeners]) l()
  }
  let buffer = ""
  let current: { id?: string; event?: string; data: string[] } = { data: [] }
  const feed = (chunk: string) => {
    raw += chunk
    buffer += chunk
    let nl: number
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl).replace(/\r$/, "")
      buffer = buffer.slice(nl + 1)
      if (line === "") {
        if (current.data.length > 0 || current.event !== undefined) {
          const data = current.data.join("\n")
          let json: unknown
          try {
            json = JSON.parse(data)
          } catch {
            json = undefined
          }
          events.push({ id: current.id, event: current.event ?? "message", data, json })
        }
        current = { data: [] }
        continue
      }
      if (line.startsWith(":")) {
        comments.push(line.slice(1).trim())
        continue
      }
      const colon = line.indexOf(":")
      const field = colon < 0 ? line : line.slice(0, colon)
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "")
      if (field === "id") current.id = value
      else if (field === "event") current.event = value
      else if (field === "data") current.data.push(value)
    }
    notify()
  }
  let ended: Promise<"end" | "error" | "aborted">
  if (res.status !== 200 || res.body === null) {
    raw = await res.text().catch(() => "")
    ended = Promise.resolve("end")
  } else {
    const reader = res.body.getReader()
    const decoder = new TextDecoder()
    ended = (async () => {
      try {
        for (;;) {
          const { done, value } = await reader.read()
          if (done) return "end" as const
          feed(decoder.decode(value, { stream: true }))
        }
      } catch {
        return controller.signal.aborted ? ("aborted" as const) : ("error" as const)
      } finally {
        notify()
      }
    })()
  }
  const until = (check: (events: ReadonlyArray<SseEvent>) => boolean, ms: number, label = "events") =>
    new Promise<void>((resolve, reject) => {
      const test = () => {
        if (check(events)) {
          clearTimeout(timer)
          listeners.delete(test)
          resolve()
        }
      }
      const timer = setTimeout(() => {
        listeners.delete(test)
        reject(new Error(`timed out after ${ms} ms waiting for ${label}; got: ${events.map((e) => `${e.event} ${e.data}`).join(" | ")}`))
      }, ms)
      listeners.add(test)
      test()
    })
  return {
    status: res.status,
    headers: res.headers,
    events,
    comments,
    text: () => raw,
    ended,
    until,
    waitFor: async (match, ms, label) => {
      await until((es) => es.some(match), ms, label)
      return events.find(match)!
    },
    close: () => controller.abort()
  }
}
