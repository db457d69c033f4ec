/**
 * One request on a service's connection: the step every request to an upstream shares, whether a
 * call runs here (src/runtime/calls.ts) or on the owner's end of a call forwarded by another
 * replica (src/http/cluster-route.ts). The live connection is used at once; one still connecting is
 * waited for up to the deadline; a request refused for an expired session is sent once more after
 * the service reconnects (the server never ran it); a broken connection counts as a failed health
 * check of the service's actor. Failures come back as they are, for each caller to classify once.
 */
import { Effect, Exit, FiberId } from "effect"
import { statusOf, type ServiceActorRef, type ServiceSnapshot } from "../machines/service.js"
import { McpRequestError, type McpConnection } from "../mcp/types.js"
import { type CancelSignal } from "../domain/cancellation.js"
import type { TooMany } from "../domain/errors.js"
import { awaitSnapshot, type WaitGate } from "./bridge.js"
import { isConnected } from "./service-views.js"

/**
 * Waits until `ready` holds for every actor (the one bridge, `awaitSnapshot`) or `timeoutMs`
 * passes: true when some wait timed out. `signal` ends it interrupted; a full gate fails it.
 */
export const waitUntil = (
  actors: ReadonlyArray<ServiceActorRef>,
  ready: (snapshot: ServiceSnapshot) => boolean,
  options: { readonly timeoutMs: number; readonly gate?: WaitGate | undefined },
  signal: CancelSignal
): Promise<Exit.Exit<boolean, TooMany>> => {
  const fiber = Effect.runFork(Effect.forEach(actors, (a) => awaitSnapshot(a, ready, options), { concurrency: "unbounded" }))
  const abort = () => fiber.unsafeInterruptAsFork(FiberId.none)
  signal.addEventListener("abort", abort)
  if (signal.aborted) abort()
  return new Promise((resolve) =>
    fiber.addObserver((exit) => {
      signal.removeEventListener("abort", abort)
      resolve(Exit.map(exit, (ends) => ends.some((w) => w.end === "timeout")))
    })
  )
}

export const notInitializing = (s: ServiceSnapshot): boolean => statusOf(s) !== "initializing"
const connectedNow = (s: ServiceSnapshot): boolean => isConnected(statusOf(s))

/** The service had no connection by the deadline: still connecting, or in another status (its snapshot says which). */
export class NotConnected {
  readonly _tag = "NotConnected"
  constructor(readonly snapshot: ServiceSnapshot) {}
  get stillConnecting(): boolean {
    return statusOf(this.snapshot) === "initializing"
  }
}

export type ServiceRequestFailure = McpRequestError | NotConnected | TooMany

export interface ServiceRequestOptions {
  /** Milliseconds left to the request's deadline. */
  readonly remaining: () => number
  readonly signal: CancelSignal
  /** The gate of waits a service still connecting enters (the store's cap on held waits). */
  readonly gate?: WaitGate | undefined
}

/** The service's connection when it is connected now (the common request: nothing to wait for). */
const liveConnection = (actor: ServiceActorRef): McpConnection | undefined => {
  const snapshot = actor.getSnapshot()
  return isConnected(statusOf(snapshot)) ? snapshot.context.connection : undefined
}

/** The connection of a service not connected now: waited for (after an expired session, until it is connected again). */
export const readyConnection = async (actor: ServiceActorRef, options: ServiceRequestOptions, reconnecting: boolean): Promise<McpConnection | Exit.Exit<never, ServiceRequestFailure>> => {
  if (reconnecting || statusOf(actor.getSnapshot()) === "initializing") {
    const waited = await waitUntil([actor], reconnecting ? connectedNow : notInitializing, { timeoutMs: options.remaining(), gate: reconnecting ? undefined : options.gate }, options.signal)
    if (Exit.isFailure(waited)) return Exit.failCause(waited.cause)
  }
  const snapshot = actor.getSnapshot()
  if (isConnected(statusOf(snapshot)) && snapshot.context.connection !== undefined) return snapshot.context.connection
  return Exit.fail(new NotConnected(snapshot))
}

/**
 * Runs `request` on the service's connection (see the top of this file). Interrupted when `signal`
 * ends a wait; a request that was sent ends as the connection says (an aborted one as its
 * McpRequestError of kind "aborted").
 */
export const requestOnService = async <A>(
  actor: ServiceActorRef,
  request: (connection: McpConnection) => Promise<A>,
  options: ServiceRequestOptions
): Promise<Exit.Exit<A, ServiceRequestFailure>> => {
  for (let retried = false; ; retried = true) {
    const connection = liveConnection(actor) ?? (await readyConnection(actor, options, retried))
    if (Exit.isExit(connection)) return connection
    try {
      return Exit.succeed(await request(connection))
    } catch (e) {
      if (!(e instanceof McpRequestError)) return Exit.die(e)
      if (e.kind === "session_expired" && !retried) {
        actor.send({ type: "TRANSPORT_CLOSED", reason: `session expired: ${e.message}`, immediate: true })
        continue
      }
      if (e.kind === "transport") actor.send({ type: "HEALTH_REPORT", ok: false, error: e.message })
      return Exit.fail(e)
    }
  }
}
