/**
 * Helpers for the tests of the routes beyond the 56 (test/extras): the test server with a services
 * file that may not exist yet, a client that sends the API key, a small
 * Server-Sent Events reader over fetch, a Prometheus text parser, and bounded waits.
 */
import { readFileSync } from "node:fs"
import { api, startTestServer, type Api, type Reply, type TestServer, type TestServerOptions } from "../support/server.js"

export type ExtrasServerOptions = Omit<TestServerOptions, "dir">

export interface ExtrasServer extends Omit<TestServer, "readFileText"> {
  /** The services file as text, or undefined when it does not exist. */
  readFileText(): string | undefined
}

/** startTestServer (test/support/server.ts), whose services file may not exist yet. */
export const startExtrasServer = async (options: ExtrasServerOptions = {}): Promise<ExtrasServer> => {
  const server = await startTestServer(options)
  return {
    ...server,
    readFileText: () => {
      try {
        return readFileSync(server.file, "utf8")
      } catch {
        return undefined
      }
    }
  }
}

/** A JSON client that sends `Authorization: Bearer <key>` with every request. */
export const authedApi = (base: string, key: string): Api => {
  const plain = api(base)
  const auth = { authorization: `Bearer ${key}` }
  return {
    request: (method, path, init = {}) => plain.request(method, path, { ...init, headers: { ...auth, ...init.headers } }),
    get: (path) => plain.request("GET", path, { headers: auth }),
    del: (path) => plain.request("DELETE", path, { headers: auth }),
    post: (path, body) =>
      plain.request("POST", path, {
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        headers: { ...auth, ...(body === undefined ? {} : { "content-type": "application/json" }) }
      })
  }
}

/** Rejects with `label` when `promise` has not settled within `ms`. */
export const within = <T>(promise: Promise<T>, ms: number, label: string): Promise<T> => {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${label}`)), ms)
  })
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Adds one service and waits (up to 10 s) until it has left initializing; asserts the answer. */
export const addService = async (client: Api, prefix: string, definition: Record<string, unknown>): Promise<Reply> => {
  const reply = await client.post(`${prefix}/add_service?wait=10`, definition)
  if (reply.status !== 200) throw new Error(`add_service ${String(definition["name"])}: ${reply.status} ${reply.text}`)
  return reply
}

/** wait_service for a status; throws when it is not reached within `timeout` seconds. */
export const waitStatus = async (client: Api, prefix: string, name: string, status: string | string[], timeout = 10): Promise<void> => {
  const reply = await client.post(`${prefix}/wait_service`, { client_id_or_service_name: name, status, timeout })
  if (reply.status !== 200 || reply.body?.data?.result !== true) {
    throw new Error(`wait_service ${name} -> ${JSON.stringify(status)}: ${reply.status} ${reply.text}`)
  }
}

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

/** One sample of a Prometheus text exposition. */
export interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

/** Parses the Prometheus text format (comments skipped). */
export const parsePrometheus = (text: string): Sample[] => {
  const out: Sample[] = []
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line)
    if (!m) continue
    const labels: Record<string, string> = {}
    for (const l of (m[3] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!.replace(/\\(.)/g, "$1")
    out.push({ name: m[1]!, labels, value: Number(m[4]) })
  }
  return out
}

/** The value of the sample with this name whose labels include `labels` (sum when several match; 0 when none). */
export const sampleValue = (samples: ReadonlyArray<Sample>, name: string, labels: Readonly<Record<string, string>> = {}): number =>
  samples
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((n, s) => n + s.value, 0)
