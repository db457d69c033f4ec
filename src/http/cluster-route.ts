/**
 * The owner's end of forwarding (src/cluster/forward.ts; docs/replicas.md, "Forwarding"):
 * `POST /_cluster/v1/forward`, served straight from node:http before the HttpApi app, only in
 * replica mode (elsewhere the path is the app's 404). The API keys and the Host/Origin guard do not
 * apply here (replicas reach each other at their advertised URLs); instead every request must carry
 * a valid signature under the cluster secret (src/cluster/signature.ts) and an id not seen before
 * (a request seen on the network is neither changed nor replayed), and anything a browser sends
 * (an Origin, a Sec-Fetch-Site) is refused outright. The body is bounded as an API request's is, and
 * not read at all when the signature header is missing, malformed or out of its time window.
 *
 * The request runs on the service's live connection only if this replica still owns the service,
 * through the step a call made here takes (src/runtime/service-request.ts): a service still
 * connecting is waited for, an expired session is reconnected once, and a transport failure counts
 * as a failed health check of the owner's actor.
 */
import type { IncomingMessage, ServerResponse } from "node:http"
import { parseServiceField } from "../redis/key-names.js"
import { FORWARD_PATH, FORWARDED_EVENTS, NotDelivered, toWire, type ForwardLine, type ForwardRequest } from "../cluster/forward.js"
import { signatureProblem, SIGNATURE_HEADER, SIGNATURE_WINDOW_MS } from "../cluster/signature.js"
import { Cause, Exit, Option } from "effect"
import { statusOf } from "../machines/service.js"
import { McpRequestError, type McpConnection, type UpstreamRequestRelay } from "../mcp/types.js"
import { NotConnected, requestOnService } from "../runtime/service-request.js"
import { log } from "../logging/log.js"
import { traceMetaOf } from "../domain/trace-context.js"
import type { Store } from "../runtime/store.js"
import type { Cluster } from "../cluster/cluster.js"
import { errorBody } from "./contract-errors.js"
import type { DirectRoute } from "./call-route.js"

/** Request ids seen within the signature window: a replay is refused. */
class SeenIds {
  readonly #seen = new Map<string, number>()
  /** True the first time an id is given (within the window). */
  first(id: string, now = Date.now()): boolean {
    if (this.#seen.has(id)) return false
    this.#seen.set(id, now + 2 * SIGNATURE_WINDOW_MS)
    // Ids are kept in insertion order: the expired ones are at the front.
    for (const [old, until] of this.#seen) {
      if (until > now) break
      this.#seen.delete(old)
    }
    return true
  }
}

const answer = (response: ServerResponse, status: number, code: string, message: string): true => {
  const body = JSON.stringify(errorBody(code, message))
  response.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body), connection: "close" })
  response.end(body)
  return true
}

/** One warning line per minute at most for refused internal requests (a flood must not flood the log). */
const refusals = { last: 0, count: 0 }
const refused = (request: IncomingMessage, why: string): void => {
  refusals.count += 1
  const now = Date.now()
  if (now - refusals.last < 60_000) return
  log.warn(`refused ${refusals.count} internal cluster request(s) in the last minute; the last from ${request.socket.remoteAddress ?? "?"}: ${why}`, {
    event: "cluster_request_refused"
  })
  refusals.last = now
  refusals.count = 0
}

/** The relay of a forwarded call, read or prompt: the upstream's requests for input do not cross replicas. */
const declined: UpstreamRequestRelay = (request) =>
  Promise.reject(new McpRequestError("protocol", `mcp-store declined ${request.method}: the request was forwarded from another replica, which cannot relay it`, -32600))

/** A replica's store and its cluster, as the route serves them. */
export interface ReplicaParts {
  readonly store: Store
  readonly cluster: Cluster
}

/**
 * The route; `replica` is undefined until the store exists, and always outside replica mode. A forwarded request carries what a
 * client's request did: its body is bounded by the API's own limit (`maxBodyBytes`) plus room for
 * the framing.
 */
export const clusterRoute = (replica: () => ReplicaParts | undefined, maxBodyBytes: number): DirectRoute => {
  const seen = new SeenIds()
  return (request, response) => {
    if (!request.url?.startsWith("/_cluster/")) return false
    const parts = replica()
    if (parts === undefined) return false
    const cluster = parts.cluster
    if (request.headers.origin !== undefined || request.headers["sec-fetch-site"] !== undefined) {
      refused(request, "sent by a browser")
      return answer(response, 403, "FORBIDDEN", "internal cluster route")
    }
    if (request.method !== "POST" || request.url !== FORWARD_PATH) return answer(response, 404, "NOT_FOUND", "no such internal route")
    // Nothing is read of a request whose signature cannot be valid (absent, malformed, out of its time window).
    const header = request.headers[SIGNATURE_HEADER] as string | undefined
    const early = signatureProblem(cluster.secret, "POST", FORWARD_PATH, "", header)
    if (early !== undefined && early !== "wrong signature") {
      refused(request, early)
      return answer(response, 401, "UNAUTHORIZED", "internal cluster route: bad signature")
    }
    const limit = maxBodyBytes + 64 * 1024
    const declaredLength = Number(request.headers["content-length"] ?? NaN)
    if (!(declaredLength > 0 && declaredLength <= limit)) return answer(response, 413, "PAYLOAD_TOO_LARGE", `the body must have a Content-Length of at most ${limit} bytes`)
    const chunks: Buffer[] = []
    let received = 0
    request.on("data", (chunk: Buffer) => {
      received += chunk.length
      if (received > declaredLength) request.destroy()
      else chunks.push(chunk)
    })
    request.on("end", () => {
      const body = Buffer.concat(chunks)
      const problem = signatureProblem(cluster.secret, "POST", FORWARD_PATH, body, header)
      if (problem !== undefined) {
        refused(request, problem)
        return answer(response, 401, "UNAUTHORIZED", "internal cluster route: bad signature")
      }
      let forwarded: ForwardRequest
      try {
        forwarded = JSON.parse(body.toString("utf8")) as ForwardRequest
      } catch {
        return answer(response, 400, "VALIDATION_ERROR", "the body is not JSON")
      }
      if (typeof forwarded !== "object" || forwarded === null || typeof forwarded.id !== "string" || typeof forwarded.field !== "string" || typeof forwarded.timeoutMs !== "number") {
        return answer(response, 400, "VALIDATION_ERROR", "not a forwarded request")
      }
      if (!seen.first(forwarded.id)) {
        refused(request, "a replayed request id")
        return answer(response, 409, "CONFLICT", "this request id was already used")
      }
      response.writeHead(200, { "content-type": "application/x-ndjson", "cache-control": "no-store" })
      const write = (line: ForwardLine) => {
        if (!response.writableEnded) response.write(`${JSON.stringify(line)}\n`)
      }
      const cancel = new AbortController()
      // The forwarding replica went away (its caller did, or it timed out): the upstream request is cancelled.
      response.once("close", () => {
        if (!response.writableFinished) cancel.abort()
      })
      execute(parts, forwarded, write, cancel.signal).then(
        (result) => response.end(`${JSON.stringify({ r: result ?? null } satisfies ForwardLine)}\n`),
        (e: unknown) => {
          const failure = e instanceof McpRequestError ? e : new McpRequestError("transport", e instanceof Error ? e.message : String(e))
          response.end(`${JSON.stringify({ e: toWire(failure) } satisfies ForwardLine)}\n`)
        }
      )
    })
    return true
  }
}

/** Runs one forwarded request on the owned service's connection. */
const execute = async ({ store, cluster }: ReplicaParts, req: ForwardRequest, write: (line: ForwardLine) => void, signal: AbortSignal): Promise<unknown> => {
  if (req.op === "redis") return { up: cluster.connection.up }
  const service = parseServiceField(req.field)
  const face = service === undefined ? undefined : store.serviceActor(service.scope, service.name)
  if (face === undefined) throw new NotDelivered(`service ${req.field} is not defined on the replica asked`)
  if (!cluster.owns(req.field)) throw new NotDelivered(`the replica asked no longer runs ${req.field} (it is moving)`)
  if (req.op === "event") {
    if (FORWARDED_EVENTS.has(req.event?.type)) face.send(req.event)
    return null
  }
  const deadline = performance.now() + Math.max(0, req.timeoutMs)
  const remaining = () => Math.max(0, deadline - performance.now())
  const run = (connection: McpConnection): Promise<unknown> => {
    const options = { timeoutMs: remaining(), signal }
    switch (req.op) {
      case "call":
        return connection.callTool(String(req.tool), req.args ?? {}, {
          ...options,
          hooks: { onProgress: (p) => write({ p }), maxTotalMs: req.maxTotalMs, relay: declined },
          // The calling replica's span, read again as any caller's trace context is.
          meta: traceMetaOf(req.meta)
        })
      case "read":
        return connection.readResource(String(req.uri), { ...options, hooks: { relay: declined } })
      case "prompt":
        return connection.getPrompt(String(req.name), req.args ?? {}, { ...options, hooks: { relay: declined } })
      case "complete":
        return connection.complete(req.params, options)
      case "ping":
        return connection.ping(options).then((ms) => {
          face.send({ type: "HEALTH_REPORT", ok: true, responseTimeMs: ms })
          return ms
        })
      default:
        return Promise.reject(new McpRequestError("protocol", `unknown forwarded operation`, -32601))
    }
  }
  // The same step as a call made here: the connection waited for, an expired session reconnected once.
  const sent = await requestOnService(face, run, { remaining, signal })
  if (Exit.isSuccess(sent)) return sent.value
  const failure = Cause.failureOption(sent.cause)
  if (Option.isNone(failure)) throw new McpRequestError("aborted", "the forwarding replica cancelled the request")
  const e = failure.value
  if (e instanceof NotConnected) {
    if (e.stillConnecting) throw new McpRequestError("timeout", "the service is still connecting on the replica that runs it")
    const { lastError } = e.snapshot.context
    throw new McpRequestError("transport", `the service is ${statusOf(e.snapshot)} on the replica that runs it${lastError ? `: ${lastError}` : ""}`)
  }
  throw e
}
