/**
 * Requests to the replica that owns a service (docs/replicas.md, "Forwarding"): the connection a
 * mirroring actor holds (src/machines/replicated.ts `useRemote`) is a `RemoteConnection`, an
 * `McpConnection` whose requests go to the owner over HTTP (`POST /_cluster/v1/forward`, one
 * keep-alive agent, signed with the cluster secret: src/cluster/signature.ts), so calls, resource
 * reads, prompts and completions on any replica go through the very code a local service takes
 * (src/runtime/calls.ts, catalog.ts): records, allow-lists, progress and time-outs stay where the
 * request arrived, only the MCP request itself runs on the owner. A request of a `per_user` service
 * names the caller's principal (`forPrincipal`), and the owner runs it on that principal's own
 * connection; its refusals come back as `PrincipalRefused`. Never request/response over
 * pub/sub.
 *
 * The answer is a stream of JSON lines: `{"p": progress}` while a tool call runs (each restarts the
 * time-out here too, as it does on the owner), then one `{"r": result}` or `{"e": failure}`, a
 * failure keeping its `McpRequestError` kind. A request that no owner ran (the owner gone or moving)
 * is sent again to the next owner, within its time-out, unless this replica knows Redis does not
 * answer (no owner can change then: it fails at once); the next owner is then asked of Redis, not of
 * the last view, and when it is this replica (it took the service over meanwhile), the request goes
 * to its own route, which runs it on the live connection. Cancelling the request (the caller went away)
 * closes it, and the owner cancels the upstream request. What cannot cross replicas (resource
 * subscriptions, logging levels) is refused. An owner whose host does not answer at all (powered
 * off, cut off: connects neither made nor refused) counts as not delivered after `CONNECT_MS`, as a
 * refused connection does: nothing was sent on a connection never made.
 *
 * An upstream's elicitation or sampling request during a forwarded call comes back on the call's
 * answer as `{"q": request}` (`{"w": key}` when the upstream withdraws it), is put to the call's
 * relay here (the caller's: an MCP client, a held call, or the REST decline), and its answer goes to
 * the owner as a request of its own (`answer`, naming the call's id and the request's key). A retry
 * of a held call that another replica holds goes to that replica (`held`, src/cluster/held-calls.ts),
 * which sends `{"a": 1}` every few seconds while the call's next step is not there yet, so a holder
 * that went silent is noticed within `HELD_SILENCE_MS`. A decision of an approval another replica
 * holds goes to that replica too (`approval`, src/cluster/shared-approvals.ts).
 */
import type { AsyncStartInput } from "../runtime/services.js"
import { randomUUID } from "node:crypto"
import { Agent, request as httpRequest, type ClientRequest, type IncomingMessage } from "node:http"
import { request as httpsRequest } from "node:https"
import type { Socket } from "node:net"
import type { CallToolResult, CompleteResult, GetPromptResult, ReadResourceResult } from "@modelcontextprotocol/client"
import type { ServiceEvent } from "../machines/service.js"
import { EMPTY_CATALOG, McpRequestError, type CallOptions, type CallProgress, type Catalog, type CatalogCapabilities, type CompleteParams, type FailureKind, type McpConnection, type RequestOptions, type TaskMethod, type ToolInfo, type UpstreamRequestRelay, UpstreamTask } from "../mcp/types.js"
import { type CancelSignal } from "../domain/cancellation.js"
import { log } from "../logging/log.js"
import type { CredentialPart } from "../domain/errors.js"
import type { HeldOwner, HeldRetry } from "../runtime/input-required.js"
import { PrincipalRefused, type PrincipalRefusal } from "../runtime/per-user-request.js"
import { sign, SIGNATURE_HEADER } from "./signature.js"
import type { ConnectionFacts } from "./shared-views.js"

/** The path of the forwarding route. */
export const FORWARD_PATH = "/_cluster/v1/forward"

/** The events a mirroring replica passes to the owner (the commands only the owner can carry out). */
export const FORWARDED_EVENTS: ReadonlySet<string> = new Set(["RESTART", "REFRESH_TOOLS", "AUTHORIZED"])

/** One forwarded request, as it travels. `id` is unique per request (the owner refuses a replay). */
export type ForwardRequest = {
  readonly id: string
  /**
   * The sender's cluster: a replica of another cluster (one that shares the secret and took over the
   * address of one that ended) answers 421 and runs nothing. Absent from a replica of an earlier version.
   */
  readonly cluster?: string | undefined
  /**
   * The advertised URL the request was sent to: a replica whose own is another refuses it (421), so
   * that a signed request seen on the network is not sent again to every other replica (each would
   * run it: ids are remembered per replica). Absent from a replica of an earlier version.
   */
  readonly to?: string | undefined
  readonly field: string
  readonly timeoutMs: number
  /**
   * A `call`, `task`, `read`, `prompt` or `complete` of a `per_user` service: the caller's principal (its
   * owner digest), whose own credential the owner uses (src/runtime/per-user-request.ts).
   */
  readonly principal?: string | undefined
} & (
  | {
      readonly op: "call"
      readonly tool: string
      readonly args: Record<string, unknown>
      readonly maxTotalMs?: number | undefined
      /** The call's trace context, as the upstream gets it in `_meta`. */
      readonly meta?: Readonly<Record<string, string>> | undefined
      /** The caller has a relay: the upstream's requests come back on the answer (`q` lines); else they are declined. */
      readonly relay?: boolean | undefined
      /** The caller follows a task itself (`startToolCall`): answered `{result}` or `{task}`. */
      readonly keepTask?: boolean | undefined
    }
  /** A request of the tasks extension on a task of the service's server. */
  | { readonly op: "task"; readonly method: TaskMethod; readonly params: Record<string, unknown> }
  /** A task the receiving replica handed to a client was seen ended on this one (`field` is empty): its call is recorded there. */
  | { readonly op: "task_ended"; readonly relay: string; readonly task: Record<string, unknown> }
  | { readonly op: "read"; readonly uri: string }
  | { readonly op: "prompt"; readonly name: string; readonly args: Record<string, string> }
  | { readonly op: "complete"; readonly params: CompleteParams }
  | { readonly op: "ping" }
  | { readonly op: "event"; readonly event: ServiceEvent }
  /**
   * Whether the receiving replica reaches Redis now (`field` is empty): an outage or a partition? A
   * no promises to take none of `leases` (the asker's) for a while; of any lease when they are absent.
   */
  | { readonly op: "redis"; readonly leases?: ReadonlyArray<string> | undefined }
  /** The caller's answer to a request relayed from a call (`q` line): the call's request id, the request's key. */
  | { readonly op: "answer"; readonly call: string; readonly key: string; readonly answer: RelayAnswer }
  /** A retry of a held call the receiving replica holds (`field` is empty): its next step (src/cluster/held-calls.ts). */
  | { readonly op: "held"; readonly retry: HeldRetry; readonly owner: HeldOwner }
  /** Cancel an asynchronous call the receiving replica runs (`field` is empty); answered with the call as it ended. */
  | { readonly op: "async_cancel"; readonly call: string; readonly scope: string; readonly owner: string }
  /** A decision of an approval the receiving replica holds (`field` is empty; src/cluster/shared-approvals.ts): answered `RemoteDecision`. */
  | { readonly op: "approval"; readonly approval: string; readonly decision: "approve" | "deny"; readonly by: string; readonly digest?: string | undefined }
  /** Start an asynchronous call on the replica that runs its service (`field` is the service's): answered with the call's entry. */
  | { readonly op: "async_start"; readonly scope: string; readonly owner: string; readonly input: AsyncStartInput }
)

/** An upstream's request during a forwarded call, for the caller to answer: keyed within the call. */
export interface RelayedRequest {
  readonly key: string
  readonly method: string
  readonly params?: Record<string, unknown> | undefined
  /** What is left of the call's time (the relay's `timeoutMs`). */
  readonly timeoutMs: number
}

/** The caller's answer to a relayed request: its result, or the JSON-RPC error the upstream gets. */
export type RelayAnswer = { readonly result: Record<string, unknown> } | { readonly error: { readonly code: number; readonly message: string; readonly data?: unknown } }

/** A failure as it travels: an `McpRequestError`'s fields. */
export interface WireFailure {
  readonly kind: FailureKind
  readonly message: string
  readonly code?: number | undefined
  readonly data?: unknown
  readonly permanent?: boolean | undefined
  readonly hint?: string | undefined
  readonly httpStatus?: number | undefined
  /** The owner did not run it (it no longer owns the service): it may be sent to the next owner. */
  readonly notRun?: boolean | undefined
  /** The owner refused a request made for a principal (src/runtime/per-user-request.ts), and the pool's bound for `too_many`. */
  readonly refusal?: PrincipalRefusal | undefined
  readonly max?: number | undefined
  /** What the principal lacks, for `credentials_required` (its values, its authorization, or both). */
  readonly missing?: ReadonlyArray<string> | undefined
}

/**
 * A request that did not reach a replica that runs the service: safe to send again. `refused`: no
 * replica of this cluster is at the address (the connection was refused, or another cluster answers).
 */
export class NotDelivered extends McpRequestError {
  constructor(
    message: string,
    readonly refused = false,
    /** Sent on a kept-alive connection the owner had closed as idle: the owner is there, the connection was not. */
    readonly stale = false
  ) {
    super("transport", message)
  }
}

/** Between two tries of a request that was not delivered (ms). */
export const RETRY_MS = 200
/**
 * The longest a new connection to a replica may take to be made (ms); past it the request was not
 * delivered. A replica's host that is gone without refusing (powered off, a partition) answers no
 * SYN, and the connect would otherwise wait out the request's whole time-out. Five seconds let a
 * connect whose first two SYNs were dropped (an owner too loaded to accept: Linux sends them again
 * after 1 s and 3 s) still be made, and are about a lease's time to live, after which a gone owner's
 * services have a new holder to send to. Giving up early costs only a new connect: the retry goes
 * to whoever holds the lease then, the same owner when it is only slow.
 */
export const CONNECT_MS = 5000
/** How often, at most, one replica is logged as not answering connections (ms). */
const UNREACHABLE_LOG_MS = 60_000
/** The longest an answer to a relayed request takes to reach the owner (ms). */
const ANSWER_MS = 5000
/** How often a replica says it is still at a held call's retry (`a` lines, ms). */
export const HELD_ALIVE_MS = 2000
/** The longest a held call's retry waits for a line of its holder (ms): past it, the holder is taken for gone. */
export const HELD_SILENCE_MS = 10_000

/**
 * One line of a forwarded request's answer: progress, an upstream's request to relay or its
 * withdrawal, a sign of life, then the result or the failure.
 */
export type ForwardLine =
  | { readonly p: CallProgress }
  | { readonly q: RelayedRequest }
  | { readonly w: string }
  | { readonly a: 1 }
  | { readonly r: unknown }
  | { readonly e: WireFailure }

export const toWire = (e: McpRequestError): WireFailure => ({
  ...(e instanceof NotDelivered ? { notRun: true } : {}),
  ...(e instanceof PrincipalRefused ? { refusal: e.refusal, max: e.max, missing: e.missing } : {}),
  kind: e.kind,
  message: e.message,
  code: e.code,
  data: e.data,
  permanent: e.permanent,
  hint: e.hint,
  httpStatus: e.httpStatus
})

const REFUSALS: ReadonlySet<string> = new Set<PrincipalRefusal>(["credentials_required", "too_many", "unavailable"])

/** The failures a replica answered itself (a status other than 200, an error line), as opposed to an exchange cut short. */
const answered = new WeakSet<object>()

/**
 * Whether `sendTo` failed with the other replica's own answer (it refused the request, or answered
 * an error), not a connection broken or silent after the request was sent: for a request that
 * answers its result only once it has acted (`async_start`), nothing was done there.
 */
export const answeredByReplica = (e: unknown): boolean => typeof e === "object" && e !== null && answered.has(e)

/** A failure the other replica answered (`answeredByReplica`). */
const theirs = <E extends McpRequestError>(e: E): E => {
  answered.add(e)
  return e
}

const fromWire = (f: WireFailure): McpRequestError =>
  typeof f.refusal === "string" && REFUSALS.has(f.refusal)
    ? new PrincipalRefused(f.refusal, String(f.message), typeof f.max === "number" ? f.max : undefined, Array.isArray(f.missing) ? (f.missing as ReadonlyArray<CredentialPart>) : undefined)
    : new McpRequestError(f.kind, String(f.message), f.code, f.data, { permanent: f.permanent, hint: f.hint, httpStatus: f.httpStatus })

/** A relay's refusal as the upstream gets it: the error's code and message (a `ProtocolError`'s, as a session sends it). */
const refusalOf = (e: unknown): RelayAnswer => {
  const error = e as { code?: unknown; message?: unknown; data?: unknown } | null
  const code = typeof error?.code === "number" && Number.isSafeInteger(error.code) ? error.code : -32603
  const message = typeof error?.message === "string" ? error.message : "Internal error"
  return { error: error?.data !== undefined ? { code, message, data: error.data } : { code, message } }
}

/** What a forwarded request's sender gives besides the request. */
export interface SendOptions {
  readonly signal?: CancelSignal | undefined
  readonly onProgress?: ((p: CallProgress) => void) | undefined
  readonly maxTotalMs?: number | undefined
  /** Answers the upstream's requests relayed during a call (`q` lines). */
  readonly relay?: UpstreamRequestRelay | undefined
  /** On a connection of its own, not a kept-alive one (a request sent again after a stale one). */
  readonly fresh?: boolean | undefined
}

type Without<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never

/** What the forwarder needs of the cluster. */
export interface ForwardTarget {
  /** The cluster's name, sent with every request. */
  readonly cluster: string
  /** The cluster secret. */
  readonly secret: string
  /**
   * The URL of the replica that owns `field` now (undefined: none known); this replica's own when it
   * does. `again`: a request was just not delivered to the last answer, so the owner is asked of
   * Redis rather than taken from its last view (which may name a replica that is gone).
   */
  ownerUrl(field: string, again: boolean): Promise<string | undefined>
  /** The largest answer read (bytes): the store's message cap, twice, for the JSON framing. */
  readonly maxAnswerBytes: number
  /**
   * Whether this replica knows Redis does not answer now: then no other replica can take a service
   * over and no new owner can be learnt, so a request no owner ran is not sent again.
   */
  readonly redisAway?: (() => boolean) | undefined
}

/**
 * The requests that answer at once and never wait on a caller: they have keep-alive sockets of their
 * own, so that they never queue behind long calls (up to 256 to one replica), some of which may be
 * waiting for the very answer (`answer`) that would end them, or hold the outage question (`redis`).
 */
const CONTROL_OPS: ReadonlySet<string> = new Set(["answer", "redis", "approval", "async_cancel", "task_ended", "event"])

/**
 * The agents' `timeout`: with one, Node's agent lets a kept-alive connection go a second before the
 * owner's `Keep-Alive: timeout=N` (without one it ignores the hint, and keeps a connection the owner
 * closes as idle, which the next request then finds reset). It also raises a `timeout` event on a
 * request whose connection is quiet that long, which nothing here listens to: each request has its
 * own time-out (`arm`).
 */
const IDLE_LIMIT_MS = 60_000

/** Sends forwarded requests to owners, on keep-alive agents: one for the calls, one for the control requests (`CONTROL_OPS`). */
export class Forwarder {
  readonly #agent = new Agent({ keepAlive: true, maxSockets: 256, timeout: IDLE_LIMIT_MS })
  readonly #control = new Agent({ keepAlive: true, maxSockets: 64, timeout: IDLE_LIMIT_MS })
  /** The replicas (origins) last logged as not answering connections, and when: one line a minute each. */
  readonly #unreachable = new Map<string, number>()

  constructor(
    private readonly target: ForwardTarget,
    /** The bound of a new connection's connect (`CONNECT_MS`; shorter in tests). */
    private readonly connectMs: number = CONNECT_MS
  ) {}

  /**
   * Sends one request to the owner of `request.field`; resolves with its result, or rejects with an
   * `McpRequestError` (the owner's, or `transport` when the owner cannot be reached, `timeout`,
   * `aborted`). `onProgress` gets each progress line.
   */
  async send(request: Without<ForwardRequest, "id">, options: SendOptions): Promise<unknown> {
    // While the service moves (its owner gone, the next not known yet, or the request refused as
    // "not mine"), a request that was never run is sent again to whoever owns it next, within its time-out.
    const deadline = performance.now() + request.timeoutMs
    let url: string | undefined
    // A request sent on a stale kept-alive connection goes once more to the same owner, at once, on a
    // connection of its own: the owner is there (it needs no look-up, which Redis away would refuse).
    let fresh = false
    for (let again = false; ; again = true) {
      if (options.signal?.aborted === true) throw new McpRequestError("aborted", "the request was cancelled")
      if (!fresh) url = await this.target.ownerUrl(request.field, again)
      try {
        if (url === undefined) throw new NotDelivered(`no replica runs ${request.field} now (its owner is changing)`)
        return await this.sendTo(url, { ...request, timeoutMs: Math.max(0, deadline - performance.now()) }, fresh ? { ...options, fresh } : options)
      } catch (e) {
        if (!(e instanceof NotDelivered)) throw e
        if (e.stale && !fresh) {
          fresh = true
          continue
        }
        fresh = false
        if (this.target.redisAway?.() === true) throw new McpRequestError("unavailable", `${e.message}, and the cluster's Redis does not answer, so no replica can take it over now; try again once it does`)
        if (performance.now() + RETRY_MS >= deadline) throw new McpRequestError("unavailable", `${e.message}; try again shortly`)
        await new Promise((resolve) => setTimeout(resolve, RETRY_MS))
      }
    }
  }

  /** `send` to the replica at `url`. */
  sendTo(url: string, request: Without<ForwardRequest, "id">, options: SendOptions): Promise<unknown> {
    // Cancelled while its owner was looked up: an abort already done fires no listener, so it is not sent.
    if (options.signal?.aborted === true) return Promise.reject(new McpRequestError("aborted", "the request was cancelled"))
    const id = randomUUID()
    const body = JSON.stringify({ ...request, id, cluster: this.target.cluster, to: url })
    // The upstream's requests relayed during the call, until answered, withdrawn, or the call's end.
    const relayed = new Map<string, AbortController>()
    const target = new URL(FORWARD_PATH, url)
    const send = target.protocol === "https:" ? httpsRequest : httpRequest
    return new Promise<unknown>((resolve, reject) => {
      let settled = false
      let timer: NodeJS.Timeout | undefined
      const started = performance.now()
      const finish = (error: McpRequestError | undefined, value?: unknown) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        connect.stop()
        options.signal?.removeEventListener("abort", onAbort)
        for (const controller of relayed.values()) controller.abort(new Error("the tool call ended"))
        relayed.clear()
        if (error !== undefined) {
          req.destroy()
          reject(error)
        } else resolve(value)
      }
      // The owner's own time-out comes first; this one covers an owner that went silent.
      const arm = () => {
        clearTimeout(timer)
        const cap = options.maxTotalMs === undefined ? Infinity : options.maxTotalMs - (performance.now() - started)
        timer = setTimeout(() => finish(new McpRequestError("timeout", `no answer from the replica that runs ${request.field} within ${request.timeoutMs} ms`)), Math.max(0, Math.min(request.timeoutMs, cap)) + 1000)
      }
      const onAbort = () => finish(new McpRequestError("aborted", "the request was cancelled"))
      const req = send(target, {
        method: "POST",
        agent: options.fresh === true ? false : target.protocol === "https:" ? undefined : CONTROL_OPS.has(request.op) ? this.#control : this.#agent,
        headers: {
          "content-type": "application/json",
          "content-length": Buffer.byteLength(body),
          [SIGNATURE_HEADER]: sign(this.target.secret, "POST", FORWARD_PATH, body)
        }
      })
      const connect = this.#boundConnect(req, target.origin, () =>
        finish(new NotDelivered(`the replica that runs ${request.field} (${target.origin}) made no connection within ${this.connectMs} ms`))
      )
      let answered = false
      req.on("error", (e: NodeJS.ErrnoException) => {
        const message = `the replica that runs ${request.field} cannot be reached (${e.message})`
        // Refused, or failed before the connection was made (host or network unreachable): nothing
        // was sent, so it can be sent elsewhere (the replica is gone). A kept-alive connection reset
        // before the answer's head came: the owner closed it as idle as the request was sent (it
        // sends the head as soon as it takes a request), so the request was not run: sent again.
        const stale = req.reusedSocket && e.code === "ECONNRESET" && !answered
        finish(e.code === "ECONNREFUSED" || !connect.made() || stale ? new NotDelivered(message, e.code === "ECONNREFUSED", stale) : new McpRequestError("transport", message))
      })
      req.on("response", (response: IncomingMessage) => {
        answered = true
        if (response.statusCode === 421) {
          // A replica of another cluster says so (nothing ran: no replica of this cluster listens at
          // that address any more); any other 421 (a proxy's) is a refusal like any other status.
          let text = ""
          response.setEncoding("utf8")
          response.on("data", (chunk: string) => void (text.length < 4096 && (text += chunk)))
          response.on("error", () => undefined)
          response.once("close", () =>
            finish(
              misdirected(text)
                ? new NotDelivered(`the replica that runs ${request.field} (${target.origin}) is gone: a replica of another cluster answers there`, true)
                : theirs(new McpRequestError("transport", `the replica that runs ${request.field} refused the forwarded request (HTTP 421)`))
            )
          )
          return
        }
        if (response.statusCode !== 200) {
          response.resume()
          return finish(theirs(new McpRequestError("transport", `the replica that runs ${request.field} refused the forwarded request (HTTP ${response.statusCode})`)))
        }
        readLines(response, this.target.maxAnswerBytes, (line) => {
          if ("p" in line) {
            arm()
            options.onProgress?.(line.p)
          } else if ("a" in line) arm()
          else if ("q" in line) this.#relay(url, request.field, id, line.q, options.relay, relayed)
          else if ("w" in line) {
            relayed.get(String(line.w))?.abort(new Error("the server withdrew its request"))
            relayed.delete(String(line.w))
          } else if ("r" in line) finish(undefined, line.r)
          else if ("e" in line) finish(line.e.notRun === true ? new NotDelivered(String(line.e.message)) : theirs(fromWire(line.e)))
        }).then(
          () => finish(new McpRequestError("transport", `the replica that runs ${request.field} ended its answer early`)),
          (e: Error) => finish(new McpRequestError("transport", `the answer of the replica that runs ${request.field} was unreadable (${e.message})`))
        )
      })
      options.signal?.addEventListener("abort", onAbort, { once: true })
      arm()
      req.end(body)
    })
  }

  /**
   * Bounds the connect of the socket `req` gets by `connectMs`, when it is a new one (a keep-alive
   * socket the agent reuses is connected already): past it, the socket is destroyed and `gone`
   * called, nothing having been sent. `made` tells whether the request has a connection; `stop`
   * (the request settled) clears the watch.
   */
  #boundConnect(req: ClientRequest, origin: string, gone: () => void): { readonly made: () => boolean; readonly stop: () => void } {
    let made = false
    let stopped = false
    let timer: NodeJS.Timeout | undefined
    let connecting: Socket | undefined
    const connected = () => {
      made = true
      clearTimeout(timer)
      this.#unreachable.delete(origin)
    }
    req.once("socket", (socket: Socket) => {
      if (stopped) return
      if (!socket.connecting) {
        made = true
        return
      }
      connecting = socket
      socket.once("connect", connected)
      timer = setTimeout(
        () =>
          // A busy event loop runs a due timer before the I/O of its turn: a connect made meanwhile is read first.
          setImmediate(() => {
            if (stopped || made) return
            socket.destroy()
            this.#logUnreachable(origin)
            gone()
          }),
        this.connectMs
      )
    })
    return {
      made: () => made,
      stop: () => {
        stopped = true
        clearTimeout(timer)
        connecting?.removeListener("connect", connected)
      }
    }
  }

  /** One line when the replica at `origin` does not answer connections, then at most one a minute while it still does not. */
  #logUnreachable(origin: string): void {
    const now = performance.now()
    const last = this.#unreachable.get(origin)
    if (last !== undefined && now - last < UNREACHABLE_LOG_MS) return
    for (const [known, at] of this.#unreachable) if (now - at >= UNREACHABLE_LOG_MS) this.#unreachable.delete(known)
    this.#unreachable.set(origin, now)
    log.info(`the replica at ${origin} made no connection within ${this.connectMs} ms (its host does not answer): the requests sent to it were not delivered, and go to whoever holds their services next`, {
      event: "cluster_replica_unreachable",
      url: origin
    })
  }

  /**
   * An upstream's request relayed from the call `call` (running at `url`): put to the caller's relay
   * (declined when it has none), its answer sent to that replica unless withdrawn meanwhile.
   */
  #relay(url: string, field: string, call: string, request: RelayedRequest, relay: UpstreamRequestRelay | undefined, relayed: Map<string, AbortController>): void {
    const key = String(request.key)
    const controller = new AbortController()
    relayed.get(key)?.abort()
    relayed.set(key, controller)
    const asked = { method: String(request.method), ...(request.params === undefined ? {} : { params: request.params }) }
    const answered: Promise<Record<string, unknown>> =
      relay === undefined
        ? Promise.reject(new McpRequestError("protocol", `mcp-store declined ${asked.method}: the caller of this tool call cannot answer it`, -32600))
        : relay(asked, { signal: controller.signal, timeoutMs: Math.max(0, Number(request.timeoutMs) || 0) })
    void answered
      .then((result): RelayAnswer => ({ result }), refusalOf)
      .then((answer) => {
        if (controller.signal.aborted) return
        relayed.delete(key)
        return this.sendTo(url, { op: "answer", field, call, key, answer, timeoutMs: ANSWER_MS }, {})
      })
      .catch((e: unknown) =>
        log.warn(`the answer to ${asked.method} during a call of ${field} could not reach the replica that runs it: ${(e as Error).message}`, {
          event: "cluster_forward_failed",
          service: field
        })
      )
  }

  /** Closes the keep-alive sockets. */
  close(): void {
    this.#agent.destroy()
    this.#control.destroy()
  }
}

/** Whether an answer's body is the forwarding route's own 421: a replica of another cluster. */
const misdirected = (text: string): boolean => {
  try {
    return (JSON.parse(text) as { error?: { code?: unknown } }).error?.code === "MISDIRECTED_REQUEST"
  } catch {
    return false
  }
}

/**
 * Reads JSON lines from a response, each at most `maxBytes` (the answer's; progress and relayed
 * requests are lines of their own, as many as a long call sends, each read and let go); resolves at
 * its end.
 */
const readLines = (response: IncomingMessage, maxBytes: number, onLine: (line: ForwardLine) => void): Promise<void> =>
  new Promise((resolve, reject) => {
    let buffered: Buffer[] = []
    /** The bytes of the line being read. */
    let pending = 0
    response.on("data", (chunk: Buffer) => {
      let start = 0
      for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, start)) {
        if (pending + (i - start) > maxBytes) break
        buffered.push(chunk.subarray(start, i))
        const text = Buffer.concat(buffered).toString("utf8")
        buffered = []
        pending = 0
        start = i + 1
        try {
          onLine(JSON.parse(text) as ForwardLine)
        } catch (e) {
          response.destroy()
          return reject(e as Error)
        }
      }
      pending += chunk.length - start
      if (pending > maxBytes) {
        // Rejected first: destroying the response reports it aborted.
        reject(new Error(`a line of more than ${maxBytes} bytes`))
        return void response.destroy()
      }
      if (start < chunk.length) buffered.push(chunk.subarray(start))
    })
    response.on("end", () => resolve())
    response.on("error", reject)
    response.on("aborted", () => reject(new Error("aborted")))
  })

const NOT_HERE = -32601

/**
 * The connection of a service that another replica runs: each request forwarded to that replica;
 * what it shows of the live connection (server info, capabilities, stderr) comes from the owner's
 * last published view (`facts`).
 */
export class RemoteConnection implements McpConnection {
  constructor(
    readonly field: string,
    private readonly forwarder: Forwarder,
    private readonly facts: () => ConnectionFacts | undefined,
    /** The principal its requests are made for (a `per_user` service's caller); undefined: the service's own. */
    private readonly principal?: string | undefined
  ) {}

  /** The same connection, each request naming `principal` (signed with the rest of the request). */
  forPrincipal(principal: string): McpConnection {
    return new RemoteConnection(this.field, this.forwarder, this.facts, principal)
  }

  /** The principal field of a forwarded request, when there is one. */
  private get who(): { readonly principal?: string } {
    return this.principal === undefined ? {} : { principal: this.principal }
  }

  get transportType(): McpConnection["transportType"] {
    return this.facts()?.transportType ?? "streamable_http"
  }
  get serverInfo(): McpConnection["serverInfo"] {
    return this.facts()?.serverInfo
  }
  get capabilities(): CatalogCapabilities {
    return this.facts()?.capabilities ?? { resources: false, subscribe: false, prompts: false, completions: false }
  }
  get logging(): boolean {
    return false
  }
  /** No process here: the owner's process is counted where it runs. */
  readonly pid = undefined
  /** The era is negotiated and remembered by the owner, which connects. */
  readonly protocolVersion = undefined
  readonly era = undefined

  async ping(options: CallOptions): Promise<number> {
    const started = performance.now()
    await this.forwarder.send({ op: "ping", field: this.field, timeoutMs: options.timeoutMs }, { signal: options.signal })
    return performance.now() - started
  }

  callTool(name: string, args: Record<string, unknown>, options: CallOptions): Promise<CallToolResult> {
    return this.call(name, args, options, false) as Promise<CallToolResult>
  }

  async startToolCall(name: string, args: Record<string, unknown>, options: CallOptions): Promise<CallToolResult | UpstreamTask> {
    const answer = (await this.call(name, args, options, true)) as { readonly result?: CallToolResult; readonly task?: UpstreamTask["task"] } | null
    if (answer?.task !== undefined) return new UpstreamTask(answer.task)
    if (answer?.result !== undefined) return answer.result
    throw new McpRequestError("protocol", "the replica that runs the service answered neither a result nor a task")
  }

  private call(name: string, args: Record<string, unknown>, options: CallOptions, keepTask: boolean): Promise<unknown> {
    const maxTotalMs = options.hooks?.maxTotalMs
    const relay = options.hooks?.relay
    return this.forwarder.send(
      { op: "call", field: this.field, ...this.who, tool: name, args, timeoutMs: options.timeoutMs, maxTotalMs, meta: options.meta, relay: relay !== undefined, ...(keepTask ? { keepTask } : {}) },
      { signal: options.signal, onProgress: options.hooks?.onProgress, maxTotalMs, relay }
    )
  }

  /** Only a store on its own file follows a task again after a restart (its asynchronous calls are on that file). */
  async followTask(): Promise<CallToolResult> {
    throw new McpRequestError("protocol", "a task is followed again only by the store that made its call", NOT_HERE)
  }

  taskRequest(method: TaskMethod, params: Record<string, unknown>, options: RequestOptions): Promise<Record<string, unknown>> {
    return this.forwarder.send({ op: "task", field: this.field, ...this.who, method, params, timeoutMs: options.timeoutMs }, { signal: options.signal }) as Promise<Record<string, unknown>>
  }

  readResource(uri: string, options: RequestOptions): Promise<ReadResourceResult> {
    return this.forwarder.send({ op: "read", field: this.field, ...this.who, uri, timeoutMs: options.timeoutMs }, { signal: options.signal }) as Promise<ReadResourceResult>
  }

  getPrompt(name: string, args: Record<string, string>, options: RequestOptions): Promise<GetPromptResult> {
    return this.forwarder.send({ op: "prompt", field: this.field, ...this.who, name, args, timeoutMs: options.timeoutMs }, { signal: options.signal }) as Promise<GetPromptResult>
  }

  complete(params: CompleteParams, options: RequestOptions): Promise<CompleteResult> {
    return this.forwarder.send({ op: "complete", field: this.field, ...this.who, params, timeoutMs: options.timeoutMs }, { signal: options.signal }) as Promise<CompleteResult>
  }

  /** The lists are the owner's, from its views: a mirror never lists. */
  async listTools(): Promise<ReadonlyArray<ToolInfo>> {
    throw new McpRequestError("protocol", "tools are listed by the replica that runs the service", NOT_HERE)
  }
  async listCatalog(): Promise<Catalog> {
    return EMPTY_CATALOG
  }

  async subscribeResource(): Promise<void> {
    throw new McpRequestError("protocol", "resource subscriptions are taken only by the replica that runs the service; connect to it, or read the resource", NOT_HERE)
  }
  async unsubscribeResource(): Promise<void> {}
  async setLoggingLevel(): Promise<void> {
    throw new McpRequestError("protocol", "logging levels are set only by the replica that runs the service", NOT_HERE)
  }

  onResourceUpdated(): () => void {
    return () => undefined
  }
  onCatalogChanged(): () => void {
    return () => undefined
  }
  onLogMessage(): () => void {
    return () => undefined
  }
  onToolsChanged(): () => void {
    return () => undefined
  }
  onClose(): () => void {
    return () => undefined
  }
  stderrTail(): ReadonlyArray<string> {
    return this.facts()?.stderr ?? []
  }
  /** Nothing to close here: the owner's connection is the owner's. */
  async close(): Promise<void> {}
}
