/**
 * Which MCP transport a URL speaks, asked with one cheap request after a first connect failed in a
 * way a wrong `transport` explains: a Streamable HTTP service whose POST was
 * refused may be an SSE endpoint (a GET opens an event stream), and an SSE service whose GET was
 * refused may be a Streamable HTTP endpoint (a JSON-RPC POST is answered in JSON-RPC). The answer
 * turns a bare HTTP status into "use the other transport".
 *
 * Bounded: one request, a time-out, at most `MAX_BODY_BYTES` of its body read, then destroyed. The
 * POST sends a `ping` (no `initialize`), so no session is opened on the server.
 */
import { request as httpRequest, type IncomingMessage } from "node:http"
import { request as httpsRequest } from "node:https"

/** How long the probe may take. */
export const PROBE_TIMEOUT_MS = 2_000

/** How much of the POST's answer is read to see JSON-RPC in it. */
const MAX_BODY_BYTES = 4_096

/**
 * "sse" when a GET of `url` opens an event stream, "streamable_http" when a JSON-RPC POST is
 * answered with JSON-RPC (or an event stream); undefined when neither, or on any failure.
 */
export const probeTransport = (
  url: string,
  headers: Readonly<Record<string, string>>,
  as: "sse" | "streamable_http",
  timeoutMs = PROBE_TIMEOUT_MS
): Promise<"sse" | "streamable_http" | undefined> =>
  new Promise((resolve) => {
    let target: URL
    try {
      target = new URL(url)
    } catch {
      return resolve(undefined)
    }
    const send = target.protocol === "https:" ? httpsRequest : httpRequest
    const body = as === "streamable_http" ? JSON.stringify({ jsonrpc: "2.0", id: "mcp-store:probe", method: "ping" }) : undefined
    let settled = false
    const done = (answer: "sse" | "streamable_http" | undefined) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      req.destroy()
      resolve(answer)
    }
    const req = send(target, {
      method: as === "sse" ? "GET" : "POST",
      headers: {
        ...headers,
        accept: as === "sse" ? "text/event-stream" : "application/json, text/event-stream",
        ...(body !== undefined ? { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)) } : {})
      }
    })
    const timer = setTimeout(() => done(undefined), timeoutMs)
    req.once("error", () => done(undefined))
    req.once("response", (res: IncomingMessage) => {
      const status = res.statusCode ?? 0
      const type = (res.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase()
      if (as === "sse") return done(status >= 200 && status < 300 && type === "text/event-stream" ? "sse" : undefined)
      if (status >= 200 && status < 300 && type === "text/event-stream") return done("streamable_http")
      if (type !== "application/json") return done(undefined)
      let text = ""
      res.setEncoding("utf8")
      res.on("data", (chunk: string) => {
        text += chunk
        if (text.length > MAX_BODY_BYTES) done(undefined)
      })
      res.once("end", () => {
        try {
          const message = JSON.parse(text) as { jsonrpc?: unknown }
          done(message?.jsonrpc === "2.0" ? "streamable_http" : undefined)
        } catch {
          done(undefined)
        }
      })
      res.once("error", () => done(undefined))
    })
    req.end(body)
  })
