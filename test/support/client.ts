/**
 * HTTP clients of a store for tests: a tiny JSON client (node:http, every request bounded), the same
 * with an API key, a raw client for any request target, a request that stays open (a long
 * wait_service), and the two store calls tests make most: add a service, wait for a status.
 */
import { Agent, request as httpRequest, type IncomingHttpHeaders } from "node:http"

/** A JSON answer: status, parsed body (or the text when it is not JSON), headers, round-trip time. */
export interface Reply<B = any> {
  readonly status: number
  readonly body: B
  readonly text: string
  readonly headers: Headers
  /** performance.now() when the whole body had arrived. */
  readonly receivedAt: number
}

export interface Api {
  get<B = any>(path: string): Promise<Reply<B>>
  post<B = any>(path: string, body?: unknown): Promise<Reply<B>>
  del<B = any>(path: string): Promise<Reply<B>>
  /** Any method, with a raw body and headers of your choice. */
  request<B = any>(method: string, path: string, init?: { body?: string; headers?: Record<string, string> }): Promise<Reply<B>>
}

/** How long a request of `api` may take: a hang fails the test, not the run. */
const REQUEST_TIMEOUT_MS = 40_000

/**
 * The connections of `api`'s requests, kept alive between them. A kept connection is let go a
 * second before the server's `Keep-Alive: timeout=N` says it closes it (Node's agent reads the hint
 * only when it has a time-out of its own: `timeout`, which otherwise only raises a `timeout` event
 * on a request that waits, which nothing here listens to), so a request never goes out on a
 * connection the server is closing.
 */
const agent = new Agent({ keepAlive: true, timeout: REQUEST_TIMEOUT_MS })

/** The headers of an answer as fetch gives them (repeated ones, such as set-cookie, kept apart). */
const headersOf = (raw: ReadonlyArray<string>): Headers => {
  const headers = new Headers()
  for (let i = 0; i + 1 < raw.length; i += 2) headers.append(raw[i]!, raw[i + 1]!)
  return headers
}

/**
 * A JSON client of a base URL (http:), over node:http: about 0.4 ms of CPU less a request than fetch,
 * and the suite sends some fifteen thousand. Redirects are not followed (the store answers none to
 * these requests; tests that follow one use fetch). A request reset on a kept connection before any
 * answer is sent once more (below).
 */
export const api = (base: string): Api => {
  const send = <B>(method: string, path: string, init: { body?: string; headers?: Record<string, string> }, retried: boolean) =>
    new Promise<Reply<B>>((resolve, reject) => {
      const headers = { ...init.headers }
      if (init.body !== undefined && !Object.keys(headers).some((h) => h.toLowerCase() === "content-length")) headers["content-length"] = String(Buffer.byteLength(init.body))
      let answered = false
      const req = httpRequest(base + path, { method, headers, agent }, (res) => {
        answered = true
        const chunks: Buffer[] = []
        res.on("data", (c: Buffer) => chunks.push(c))
        res.on("error", reject)
        res.on("end", () => {
          clearTimeout(timer)
          const text = Buffer.concat(chunks).toString("utf8")
          const receivedAt = performance.now()
          let body: unknown = text
          try {
            body = JSON.parse(text)
          } catch {
            // not JSON: keep the text
          }
          resolve({ status: res.statusCode ?? 0, body: body as B, text, headers: headersOf(res.rawHeaders), receivedAt })
        })
      })
      const timer = setTimeout(() => req.destroy(new Error(`${method} ${base}${path}: no answer within ${REQUEST_TIMEOUT_MS / 1000} s`)), REQUEST_TIMEOUT_MS)
      req.on("error", (e: NodeJS.ErrnoException) => {
        clearTimeout(timer)
        // A kept connection the server had closed as the request went out (it ended, or closed
        // its idle connections): no answer began, so the server took nothing; sent once more on a
        // new connection, as Node's documentation of `reusedSocket` advises.
        if (!retried && !answered && req.reusedSocket && e.code === "ECONNRESET") resolve(send<B>(method, path, init, true))
        else reject(e)
      })
      req.end(init.body)
    })
  const request = <B>(method: string, path: string, init: { body?: string; headers?: Record<string, string> } = {}) => send<B>(method, path, init, false)
  return {
    request,
    get: (path) => request("GET", path),
    del: (path) => request("DELETE", path),
    post: (path, body) =>
      request("POST", path, body === undefined ? {} : { body: JSON.stringify(body), headers: { "content-type": "application/json" } })
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

/**
 * A request over node:http with any method, body and headers (fetch cannot send a body the server
 * refuses before reading it all without failing with EPIPE). Resolves with status, headers and body
 * text. `target`: the request line's target as sent, instead of the URL's path (no URL parsing: a
 * doubled slash, `*x`, an absolute form).
 */
export const rawRequest = (
  url: string,
  method: string,
  body: Buffer | string | undefined,
  headers: Record<string, string>,
  target?: string
): Promise<{ status: number; text: string; headers: IncomingHttpHeaders }> =>
  new Promise((resolve, reject) => {
    const req = httpRequest(url, { method, headers, ...(target === undefined ? {} : { path: target }) }, (res) => {
      const chunks: Buffer[] = []
      res.on("data", (c: Buffer) => chunks.push(c))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8"), headers: res.headers }))
      res.on("error", reject)
    })
    req.setTimeout(20_000, () => req.destroy(new Error(`${method} ${url} timed out`)))
    req.on("error", reject)
    req.end(body)
  })

/** A request left open (a long wait_service) by `openRequest`. */
export interface OpenRequest {
  /** Resolves once the whole request (headers and body) has been handed to the socket. */
  readonly sent: Promise<void>
  /** Resolves with the status and body, or status 0 when the connection was cut. */
  readonly done: Promise<{ status: number; text: string }>
  close(): void
}

/** A POST that stays open (a long wait_service): `done` resolves with the status, or 0 when the connection was cut. */
export const openRequest = (url: string, body: unknown): OpenRequest => {
  const text = JSON.stringify(body)
  let req: ReturnType<typeof httpRequest> | undefined
  let sent!: Promise<void>
  const done = new Promise<{ status: number; text: string }>((resolve) => {
    req = httpRequest(url, { method: "POST", headers: { "content-type": "application/json", "content-length": Buffer.byteLength(text) } }, (res) => {
      const chunks: Buffer[] = []
      res.on("data", (c: Buffer) => chunks.push(c))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }))
      res.on("error", () => resolve({ status: 0, text: "" }))
      res.on("close", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }))
    })
    const request = req
    sent = new Promise<void>((resolveSent) => {
      request.once("finish", () => resolveSent())
      request.once("close", () => resolveSent())
    })
    req.on("error", () => resolve({ status: 0, text: "" }))
    req.end(text)
  })
  return { sent, done, close: () => req?.destroy() }
}

/** Adds one service and waits (up to 10 s) until it has left initializing; asserts the answer. */
export const addService = async (client: Api, prefix: string, definition: Record<string, unknown>): Promise<Reply> => {
  const reply = await client.post(`${prefix}/add_service?wait=10`, definition)
  if (reply.status !== 200) throw new Error(`add_service ${String(definition["name"])}: ${reply.status} ${reply.text}`)
  return reply
}

/** A principal gives its own credential of a `per_user` service (PUT .../credentials/{service}); throws unless it is kept. */
export const giveCredential = async (client: Api, prefix: string, service: string, values: { readonly headers?: Record<string, string>; readonly env?: Record<string, string> }): Promise<Reply> => {
  const reply = await client.request("PUT", `${prefix}/credentials/${encodeURIComponent(service)}`, { body: JSON.stringify(values), headers: { "content-type": "application/json" } })
  if (reply.status !== 200) throw new Error(`PUT credentials of ${service}: ${reply.status} ${reply.text}`)
  return reply
}

/** wait_service for a status; throws when it is not reached within `timeout` seconds. */
export const waitStatus = async (client: Api, prefix: string, name: string, status: string | string[], timeout = 10): Promise<void> => {
  const reply = await client.post(`${prefix}/wait_service`, { client_id_or_service_name: name, status, timeout })
  if (reply.status !== 200 || reply.body?.data?.result !== true) {
    throw new Error(`wait_service ${name} -> ${JSON.stringify(status)}: ${reply.status} ${reply.text}`)
  }
}
