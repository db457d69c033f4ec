/**
 * The owner's end of forwarding (src/cluster/forward.ts; docs/replicas.md, "Forwarding"):
 * `POST /_cluster/v1/forward`, served straight from node:http before the HttpApi app, only in
 * replica mode (elsewhere the path is the app's 404). The API keys and the Host/Origin guard do not
 * apply here (replicas reach each other at their advertised URLs); instead every request must carry
 * a valid signature under the cluster secret (src/cluster/signature.ts) and an id not seen before
 * (a request seen on the network is neither changed nor replayed), and anything a browser sends
 * (an Origin, a Sec-Fetch-Site) is refused outright. The body is bounded as an API request's is, and
 * not read at all unless the request's head (method, path, time, length) is signed with the secret.
 *
 * The request runs on the service's live connection only if this replica still owns the service
 * and its actor runs it (never forwarded on from here), through the step a call made here takes
 * (src/runtime/service-request.ts): a service still connecting is waited for, an expired session
 * is reconnected once, and a transport failure counts
 * as a failed health check of the owner's actor. A request of a `per_user` service runs on its
 * caller's own connection instead (the `principal` it names; src/runtime/per-user-request.ts), and
 * one that names none is refused. An upstream's elicitation or sampling request
 * during a forwarded call whose caller has a relay goes back on the answer (`q`), and waits for the
 * caller's answer (`answer`, a request of its own) or the call's end. Some requests name no service:
 * `answer`; `held`, a retry of a call held here for its caller's input that reached another
 * replica (src/cluster/held-calls.ts), answered with the call's next step; and `approval`, a
 * decision made on another replica of an approval whose call waits here (src/cluster/shared-approvals.ts).
 * An asynchronous call started here for another replica is rendered by the REST call answers the
 * server built once on the `Calls` service (`ReplicaParts.asyncAnswer`).
 */
import type { IncomingMessage, ServerResponse } from "node:http"
import { parseServiceField } from "../redis/key-names.js"
import { FORWARD_PATH, FORWARDED_EVENTS, HELD_ALIVE_MS, NotDelivered, RemoteConnection, toWire, type ForwardLine, type ForwardRequest, type RelayAnswer } from "../cluster/forward.js"
import { stepToWire } from "../cluster/held-calls.js"
import { headProblem, signatureProblem, SIGNATURE_HEADER, SIGNATURE_WINDOW_MS } from "../cluster/signature.js"
import { Cause, Effect, Exit, Option } from "effect"
import { ClusterUnavailable, CredentialsRequired, ServiceUnavailable, TooMany } from "../domain/errors.js"
import { statusOf, type ServiceActorRef } from "../machines/service.js"
import { McpRequestError, TASK_METHODS, UpstreamTask, type CallProgress, type McpConnection, type UpstreamRequestRelay } from "../mcp/types.js"
import { NotConnected, requestOnService } from "../runtime/service-request.js"
import { PrincipalRefused, requestAsPrincipal } from "../runtime/per-user-request.js"
import { perUserOf } from "../runtime/user-credentials.js"
import { log } from "../logging/log.js"
import { traceMetaOf } from "../domain/trace-context.js"
import type { Store } from "../runtime/store.js"
import type { AsyncRender } from "../runtime/async-calls.js"
import type { RemoteDecision } from "../runtime/approvals.js"
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

/**
 * The upstream's requests relayed from forwarded calls to their callers' replicas, waiting for
 * their answers: by the call's request id, then the request's key.
 */
class Relayed {
  readonly #calls = new Map<string, Map<string, (answer: RelayAnswer) => void>>()

  /** The relay of the call `call`: each request goes out as a `q` line and waits for its `answer` (or its signal). */
  relayOf(call: string, write: (line: ForwardLine) => void): UpstreamRequestRelay {
    let next = 0
    return (request, { signal, timeoutMs }) =>
      new Promise((resolve, reject) => {
        const key = String(++next)
        let waiting = this.#calls.get(call)
        if (waiting === undefined) this.#calls.set(call, (waiting = new Map()))
        const calls = this.#calls
        const done = () => {
          signal.removeEventListener("abort", withdraw)
          waiting.delete(key)
          if (waiting.size === 0 && calls.get(call) === waiting) calls.delete(call)
        }
        // The upstream cancelled it, or the call ended: the caller's side is told to stop asking.
        const withdraw = () => {
          done()
          write({ w: key })
          reject(signal.reason)
        }
        if (signal.aborted) return reject(signal.reason)
        signal.addEventListener("abort", withdraw, { once: true })
        waiting.set(key, (answer) => {
          done()
          if ("result" in answer) resolve(answer.result)
          else reject(new McpRequestError("protocol", String(answer.error.message), Number(answer.error.code), answer.error.data))
        })
        write({ q: { key, method: request.method, ...(request.params === undefined ? {} : { params: request.params }), timeoutMs } })
      })
  }

  /** The caller's answer to a relayed request; false when nothing waits for it (answered, withdrawn, the call ended). */
  answer(call: string, key: string, answer: RelayAnswer): boolean {
    const settle = this.#calls.get(call)?.get(key)
    settle?.(answer)
    return settle !== undefined
  }
}

/** A replica's store and its cluster, as the route serves them. */
export interface ReplicaParts {
  readonly store: Store
  readonly cluster: Cluster
  /** How an asynchronous call's answer is rendered: the REST call answers' (`callAnswers`), built once on the `Calls` service. */
  readonly asyncAnswer: AsyncRender
}

/**
 * The route; `replica` is undefined until the store exists, and always outside replica mode. A forwarded request carries what a
 * client's request did: its body is bounded by the API's own limit (`maxBodyBytes`) plus room for
 * the framing.
 */
export const clusterRoute = (replica: () => ReplicaParts | undefined, maxBodyBytes: number): DirectRoute => {
  const seen = new SeenIds()
  const relayed = new Relayed()
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
    const limit = maxBodyBytes + 64 * 1024
    const declaredLength = Number(request.headers["content-length"] ?? NaN)
    if (!(declaredLength > 0 && declaredLength <= limit)) return answer(response, 413, "PAYLOAD_TOO_LARGE", `the body must have a Content-Length of at most ${limit} bytes`)
    // Nothing is read of a request whose head is not signed with the secret (its length included):
    // nobody without it makes this replica read and hold a body.
    const header = request.headers[SIGNATURE_HEADER] as string | undefined
    const early = headProblem(cluster.secret, "POST", FORWARD_PATH, declaredLength, header)
    if (early !== undefined) {
      refused(request, early)
      return answer(response, 401, "UNAUTHORIZED", "internal cluster route: bad signature")
    }
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
      if (forwarded.cluster !== undefined && forwarded.cluster !== cluster.options.name) {
        refused(request, `sent to cluster '${String(forwarded.cluster).slice(0, 100)}', not this one (the same secret in two clusters?)`)
        return answer(response, 421, "MISDIRECTED_REQUEST", "this replica is of another cluster")
      }
      if (forwarded.to !== undefined && cluster.advertiseUrl !== "" && forwarded.to !== cluster.advertiseUrl) {
        refused(request, `sent to ${String(forwarded.to).slice(0, 200)}, not to this replica (${cluster.advertiseUrl}): a request seen on the network, sent again here?`)
        return answer(response, 421, "MISDIRECTED_REQUEST", "this request was sent to another replica")
      }
      if (!seen.first(forwarded.id)) {
        refused(request, "a replayed request id")
        return answer(response, 409, "CONFLICT", "this request id was already used")
      }
      response.writeHead(200, { "content-type": "application/x-ndjson", "cache-control": "no-store" })
      // Sent at once, before the request runs: a forwarding replica that has no answer head knows
      // the request was not taken (a kept-alive connection this replica closed as idle just as the
      // request came), and sends it again.
      response.flushHeaders()
      const write = (line: ForwardLine) => {
        if (!response.writableEnded) response.write(`${JSON.stringify(line)}\n`)
      }
      const cancel = new AbortController()
      // The forwarding replica went away (its caller did, or it timed out): the upstream request is cancelled.
      response.once("close", () => {
        if (!response.writableFinished) cancel.abort()
      })
      execute(parts, forwarded, write, cancel.signal, relayed).then(
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

/** The longest approver's label taken from another replica (it is the key's role and label, in words). */
const MAX_BY_CHARS = 500

/** A decision carried from another replica, applied to an approval held here as a decision made here would be. */
const decideHere = (store: Store, req: Extract<ForwardRequest, { op: "approval" }>): RemoteDecision => {
  const digest = req.digest
  if ((req.decision !== "approve" && req.decision !== "deny") || typeof req.by !== "string" || req.by.length > MAX_BY_CHARS || (digest !== undefined && typeof digest !== "string")) {
    throw new McpRequestError("protocol", "not a decision of an approval", -32602)
  }
  const decided = store.approvals.decide(String(req.approval), req.decision, req.by, digest)
  if (decided === undefined || decided === "mismatch") {
    log.warn(`refused a decision (${req.decision}) of approval ${String(req.approval).slice(0, 64)} made on another replica by ${req.by}: ${decided === undefined ? "no call waits for it here" : "the arguments digest given is not the call's"}`, {
      event: "approval_decision_refused",
      approval_id: String(req.approval).slice(0, 64)
    })
    return decided === undefined ? { missing: true } : { mismatch: true }
  }
  return { decided }
}

/**
 * The leases a replica that lost Redis names in its question (those it keeps): anything but a list
 * of strings names every lease, so the promise of the answer covers them all (the safe side).
 */
const leasesNamed = (leases: unknown): ReadonlyArray<string> | undefined =>
  Array.isArray(leases) && leases.every((l): l is string => typeof l === "string") ? leases : undefined

/** Runs one forwarded request on the owned service's connection (or, for `answer` and `held`, on what it names). */
const execute = async ({ store, cluster, asyncAnswer }: ReplicaParts, req: ForwardRequest, write: (line: ForwardLine) => void, signal: AbortSignal, relayed: Relayed): Promise<unknown> => {
  if (req.op === "redis") return cluster.reachesRedis(leasesNamed(req.leases))
  if (req.op === "answer") {
    const answer = req.answer as RelayAnswer | undefined
    if (typeof answer !== "object" || answer === null || !("result" in answer || "error" in answer)) throw new McpRequestError("protocol", "not an answer to a relayed request", -32602)
    return { taken: relayed.answer(String(req.call), String(req.key), answer) }
  }
  if (req.op === "held") return heldTurn(store, req, write, signal)
  if (req.op === "async_start") {
    const label = String(req.scope)
    const scope = label === "store" ? Exit.succeed(store.forStore().effects) : Effect.runSyncExit(store.agentContext(label))
    if (Exit.isFailure(scope)) throw new McpRequestError("protocol", `not a scope: ${label}`, -32602)
    // The call's owner (its caller's digest, signed with the request) names whose per-user credential it uses.
    const owner = String(req.owner)
    const caller = () => ({ words: label === "store" ? "a caller of the store" : `a caller of agent '${label}'`, owner })
    const started = await store.asyncCalls.start(scope.value, { ...req.input, caller }, owner, asyncAnswer, { here: true })
    // Redis does not keep it here, so it was not started: the asking replica runs it itself, or refuses it the same way.
    if (started instanceof ClusterUnavailable) throw new NotDelivered(started.message)
    return started instanceof TooMany ? { refused: started.message } : { call: started }
  }
  if (req.op === "approval") return decideHere(store, req)
  if (req.op === "async_cancel") return { call: (await store.asyncCalls.cancel(String(req.call), String(req.scope), String(req.owner))) ?? null }
  if (req.op === "task_ended") {
    if (typeof req.task === "object" && req.task !== null) store.tasks.seen(String(req.relay), req.task)
    return null
  }
  const service = parseServiceField(req.field)
  const face = service === undefined ? undefined : store.serviceActor(service.scope, service.name)
  if (face === undefined) throw new NotDelivered(`service ${req.field} is not defined on the replica asked`)
  if (!cluster.owns(req.field)) throw new NotDelivered(`the replica asked no longer runs ${req.field} (it is moving)`)
  // Its actor still forwards (the service moves here or away): not run here, and never sent on, as
  // it may come from this very replica (one that took the service over while forwarding: `Cluster.#ownerUrl`).
  const moving = () => new NotDelivered(`the replica asked does not run ${req.field} (it is moving)`)
  const mirrors = () => face.getSnapshot().context.connection instanceof RemoteConnection
  if (mirrors()) throw moving()
  if (req.op === "event") {
    if (FORWARDED_EVENTS.has(req.event?.type)) face.send(req.event)
    return null
  }
  const deadline = performance.now() + Math.max(0, req.timeoutMs)
  const remaining = () => Math.max(0, deadline - performance.now())
  const run = (connection: McpConnection): Promise<unknown> => {
    // Checked again once the request has waited (for the service to connect; a `per_user` one also
    // for its caller's credential, read from Redis, and its own connection to open): the lease may
    // have been lost meanwhile, or the actor turned into a mirror, and the principal's pooled
    // connection given here never forwards, so the lease and the actor are asked too. Not a failure
    // of the service (no health report): `MOVED` comes back as a value, answered "not run" below.
    if (connection instanceof RemoteConnection || !cluster.owns(req.field) || mirrors()) return Promise.resolve(MOVED)
    const options = { timeoutMs: remaining(), signal }
    switch (req.op) {
      case "call": {
        const callOptions = {
          ...options,
          // The caller's replica puts the upstream's requests to its caller when it says it can (a replica of an earlier version never does).
          hooks: { onProgress: (p: CallProgress) => write({ p }), maxTotalMs: req.maxTotalMs, relay: req.relay === true ? relayed.relayOf(req.id, write) : declined },
          // The calling replica's span, read again as any caller's trace context is.
          meta: traceMetaOf(req.meta)
        }
        if (req.keepTask !== true) return connection.callTool(String(req.tool), req.args ?? {}, callOptions)
        return connection.startToolCall(String(req.tool), req.args ?? {}, callOptions).then((r) => (r instanceof UpstreamTask ? { task: r.task } : { result: r }))
      }
      case "task":
        if (!TASK_METHODS.has(req.method) || typeof req.params !== "object" || req.params === null) throw new McpRequestError("protocol", "not a request of the tasks extension", -32602)
        return connection.taskRequest(req.method, req.params, options)
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
  // A `per_user` service: the request runs on the principal's own connection, never the shared one.
  const principal = typeof req.principal === "string" && req.principal.length > 0 && req.principal.length <= MAX_PRINCIPAL_CHARS ? req.principal : undefined
  const ran = (value: unknown): unknown => {
    if (value === MOVED) throw moving()
    return value
  }
  if (perUserOf(face.getSnapshot().context.definition) !== undefined && (PER_USER_OPS.has(req.op) || principal !== undefined)) return ran(await asPrincipal(store, face, req, principal, run, remaining, signal))
  // The same step as a call made here: the connection waited for, an expired session reconnected once.
  const sent = await requestOnService(face, run, { remaining, signal })
  if (Exit.isSuccess(sent)) return ran(sent.value)
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

/** What `run` gives back instead of running a request on a connection that forwards (the actor mirrors now). */
const MOVED = Symbol("moved")

/** The longest principal (an owner digest) taken from another replica. */
const MAX_PRINCIPAL_CHARS = 200
/** The requests of a `per_user` service that are made for a principal (a `task` too: its call's, never the shared connection's). */
const PER_USER_OPS: ReadonlySet<string> = new Set(["call", "task", "read", "prompt", "complete"])

/**
 * A request forwarded for a principal (src/runtime/per-user-request.ts): run on its own connection
 * here; a refusal (no credential, the pool full, Redis away) goes back as `PrincipalRefused`, which
 * the replica asked turns into the same error a request made here gets.
 */
const asPrincipal = async (
  store: Store,
  face: ServiceActorRef,
  req: ForwardRequest,
  principal: string | undefined,
  run: (connection: McpConnection) => Promise<unknown>,
  remaining: () => number,
  // The forwarding replica cancelled: no more waiting for the service, the credential or the principal's connection.
  signal: AbortSignal
): Promise<unknown> => {
  const sent = await requestAsPrincipal(store.credentials, face, principal, { remaining, signal, subject: `a forwarded ${req.op} of ${req.field}` }, run)
  if (Exit.isSuccess(sent)) return sent.value
  const failure = Cause.failureOption(sent.cause)
  if (Option.isNone(failure)) throw new McpRequestError("aborted", "the forwarding replica cancelled the request")
  const e = failure.value
  if (e instanceof CredentialsRequired) throw new PrincipalRefused("credentials_required", e.message, undefined, e.missing)
  if (e instanceof TooMany) throw new PrincipalRefused("too_many", e.message, e.max)
  if (e instanceof ServiceUnavailable) throw new PrincipalRefused("unavailable", e.message)
  if (e instanceof NotConnected) {
    const { lastError } = e.snapshot.context
    throw new McpRequestError("transport", `the service is ${statusOf(e.snapshot)} on the replica that runs it${lastError ? `: ${lastError}` : ""}`)
  }
  throw e
}

/**
 * A retry of a call held here, from the replica it reached: the call's next step (or the retry's
 * refusal), with the call's progress meanwhile and a sign of life every HELD_ALIVE_MS.
 */
const heldTurn = async (store: Store, req: Extract<ForwardRequest, { op: "held" }>, write: (line: ForwardLine) => void, signal: AbortSignal): Promise<unknown> => {
  const { retry, owner } = req
  const text = (v: unknown): v is string => typeof v === "string"
  const retryOk = typeof retry === "object" && retry !== null && text(retry.state) && typeof retry.responses === "object" && retry.responses !== null
  const ownerOk = typeof owner === "object" && owner !== null && text(owner.scope) && text(owner.owner) && text(owner.subject)
  if (!retryOk || !ownerOk) throw new McpRequestError("protocol", "not a retry of a held call", -32602)
  const alive = setInterval(() => write({ a: 1 }), HELD_ALIVE_MS)
  try {
    return stepToWire(await store.held.resume(retry, owner, { onProgress: (p) => write({ p }), signal }))
  } finally {
    clearInterval(alive)
  }
}
