/**
 * The one step of a request on a `per_user` service (README, Per-user credentials): a tool call
 * (src/runtime/calls.ts), a request on a task such a call started (`relayTaskRequest`, and a task
 * followed again after a restart), a resource read, a prompt, a completion or a resource
 * subscription (src/runtime/catalog.ts), and
 * the owner's end of such a request forwarded by another replica (src/http/cluster-route.ts). The
 * request goes through the caller's own connection (src/runtime/user-credentials.ts), opened with
 * its own credential, never through the service's shared one; a caller with none is refused
 * `CredentialsRequired`, told what to give and where.
 *
 * In replica mode a replica that does not run the service sends the request to the one that does
 * (the mirror's connection's `forPrincipal`, src/cluster/forward.ts), naming the principal; that
 * replica reads the principal's credential (shared in Redis) and uses its own pool. Its refusals
 * come back as `PrincipalRefused` and are made the same errors here.
 */
import { Cause, Exit, Option } from "effect"
import { CredentialsRequired, ServiceUnavailable, type CredentialPart } from "../domain/errors.js"
import { scopeLabel, type Scope } from "../domain/service-definition.js"
import { log } from "../logging/log.js"
import { statusOf, type ServiceActorRef } from "../machines/service.js"
import { McpRequestError, type McpConnection } from "../mcp/types.js"
import { Cancel, type CancelSignal } from "../domain/cancellation.js"
import type { WaitGate } from "./bridge.js"
import { readyConnection, type ServiceRequestFailure } from "./service-request.js"
import type { UserCredential } from "../config/credentials-file.js"
import { perUserOf, perUserTooMany, type ConnectionHold, type PerUserNames, type UserCredentials } from "./user-credentials.js"

/** Why the replica that runs a service refused a request forwarded for a principal. */
export type PrincipalRefusal = "credentials_required" | "too_many" | "unavailable"

/** A refusal by the replica that runs the service, as it travels back to the replica asked (src/cluster/forward.ts). */
export class PrincipalRefused extends McpRequestError {
  constructor(
    readonly refusal: PrincipalRefusal,
    message: string,
    /** The pool's bound (`too_many`). */
    readonly max?: number | undefined,
    /** What the caller lacks (`credentials_required`), as the replica that runs the service found it. */
    readonly missing?: ReadonlyArray<CredentialPart> | undefined
  ) {
    super("protocol", message)
  }
}

/** The routes of a principal's credential for a service: PUT gives its values, POST `/authorize` its own upstream OAuth authorization. */
const credentialsPath = (scope: Scope, name: string): string =>
  `${scope.kind === "store" ? "/for_store" : `/for_agent/${encodeURIComponent(scope.agentId)}`}/credentials/${encodeURIComponent(name)}`

/** Where a principal gives its credential for a service (`authorize`: authorizes the upstream for itself, `per_user.oauth`). */
export const credentialsRoute = (scope: Scope, name: string, authorize = false): string =>
  authorize ? `POST ${credentialsPath(scope, name)}/authorize` : `PUT ${credentialsPath(scope, name)}`

const describeNames = (names: PerUserNames): string => [...names.headers.map((h) => `header ${h}`), ...names.env.map((e) => `environment variable ${e}`)].join(", ")

/**
 * The refusal of `subject` (a call of a tool, a read of a resource...) for want of the caller's own
 * credential: its values, its own OAuth authorization of the upstream, or both (`missing`), each
 * with the route that gives it; a log line. `message`: the refusal's words as the replica that runs
 * the service put them (a forwarded request's), kept as they are.
 */
export const credentialsRequired = (scope: Scope, name: string, names: PerUserNames, subject: string, why: string, missing: ReadonlyArray<CredentialPart>, message?: string): CredentialsRequired => {
  const values = missing.includes("values")
  const authorize = missing.includes("authorization")
  const label = scopeLabel(scope)
  log.warn(`${subject} refused: ${why}`, { event: "credentials_required", scope: label, service: name })
  const steps = [
    ...(values ? [`give ${describeNames(names)} with ${credentialsRoute(scope, name)} {"headers": {...}, "env": {...}}`] : []),
    ...(authorize ? [`authorize the upstream for yourself with ${credentialsRoute(scope, name, true)} (answers an authorization_url to open in a browser)`] : [])
  ]
  const what = values && authorize ? "credential and OAuth authorization" : authorize ? "OAuth authorization" : "credential"
  return new CredentialsRequired({
    message: message ?? `Service '${name}' takes each caller's own ${what}, and ${why}: ${steps.join(", then ")}`,
    serviceName: name,
    scope: label,
    headers: names.headers,
    env: names.env,
    oauth: names.oauth,
    missing,
    route: credentialsRoute(scope, name, !values)
  })
}

/** What a forwarded refusal says is missing, when it says it in terms known here. */
const missingOf = (parts: unknown): ReadonlyArray<CredentialPart> | undefined => {
  if (!Array.isArray(parts) || parts.length === 0) return undefined
  const known = parts.filter((p): p is CredentialPart => p === "values" || p === "authorization")
  return known.length === parts.length ? [...new Set(known)] : undefined
}

/** What a per-user request fails with besides its connection's failures. */
export type PerUserFailure = ServiceRequestFailure | CredentialsRequired | ServiceUnavailable

export interface PerUserRequestOptions {
  /** Milliseconds left to the request's deadline. */
  readonly remaining: () => number
  /** What the request is, for a refusal's log line ("call of 'x__y'", "read of resource 'u'"). */
  readonly subject: string
  /** A resource subscription: holds the principal's connection once the request succeeded (user-credentials.ts). */
  readonly hold?: ConnectionHold | undefined
  /** Ends a wait for the service still connecting (`readyConnection`), and the gate that wait enters. */
  readonly signal?: CancelSignal | undefined
  readonly gate?: WaitGate | undefined
  /** Shares the caller's credential check with the requests made with it (a listen's resource URIs). */
  readonly checks?: CredentialChecks | undefined
}

/** How a principal's credential check ended: the values to open its connection with, or the refusal. */
type Checked = Exit.Exit<UserCredential, PerUserFailure>

/**
 * The credential checks of several requests of one caller made together (a 2026-07-28 listen
 * naming many resource URIs): each service's credential (and OAuth authorization) is read once,
 * and a refusal logged once, however many of its URIs are named. Kept for those requests only: a
 * later request reads the credential again.
 */
export class CredentialChecks {
  private readonly checked = new Map<string, Promise<Checked>>()

  /** The check of `key` (a service and principal), run by the first request that needs it. */
  of(key: string, check: () => Promise<Checked>): Promise<Checked> {
    let known = this.checked.get(key)
    if (known === undefined) this.checked.set(key, (known = check()))
    return known
  }
}

/** A request's signal that never ends: a request given none waits for its deadline only. */
const NEVER: CancelSignal = new Cancel()

/**
 * Runs `request` for `principal` on a `per_user` service (see the top of this file): through the
 * replica that runs it when that is another one, else on the principal's own pooled connection.
 */
export const requestAsPrincipal = async <A>(
  credentials: UserCredentials | undefined,
  actor: ServiceActorRef,
  principal: string | undefined,
  options: PerUserRequestOptions,
  request: (connection: McpConnection) => Promise<A>
): Promise<Exit.Exit<A, PerUserFailure>> => {
  const { scope, name, definition } = actor.getSnapshot().context
  const names = perUserOf(definition) ?? { headers: [], env: [], oauth: false }
  // A service that takes only an OAuth authorization has no values to give: the connection adds nothing but the token.
  const takesValues = names.headers.length > 0 || names.env.length > 0
  const required = (why: string, missing: ReadonlyArray<CredentialPart>) => Exit.fail(credentialsRequired(scope, name, names, options.subject, why, missing))
  const notGiven = () => required(takesValues ? "this caller has not given its own" : "this caller has not authorized it", [takesValues ? "values" : "authorization"])
  // What the caller's request needs cannot be read (replica mode, Redis away): refused 503, a log line.
  const unreadable = (what: string, e: unknown) => {
    const refusal = unavailable(actor, `${what} cannot be read now (${e instanceof Error ? e.message : String(e)})`)
    log.warn(`${options.subject} refused: ${refusal.message}`, { event: "credentials_unavailable", scope: scopeLabel(scope), service: name })
    return Exit.fail(refusal)
  }
  // The key's (or token subject's) digest, the same on every face (src/http/gateway/session-seal.ts
  // `sessionOwner`); a request made without a caller (the library's) has no credential of its own.
  if (principal === undefined || credentials === undefined) return notGiven()
  // Still connecting (a start, or a move between replicas): waited for, as a request on the shared connection is.
  const connection = await readyConnection(actor, { remaining: options.remaining, signal: options.signal ?? NEVER, gate: options.gate }, false)
  if (Exit.isExit(connection)) return connection
  // Another replica runs the service: the request goes there, for this principal.
  if (connection.forPrincipal !== undefined) {
    try {
      return Exit.succeed(await request(connection.forPrincipal(principal)))
    } catch (e) {
      if (e instanceof PrincipalRefused) {
        // As the replica that runs the service found it (values, authorization or both), in its words;
        // a replica that does not say what is missing is answered as a caller with nothing given.
        const missing = missingOf(e.missing)
        if (e.refusal === "credentials_required") return missing === undefined ? notGiven() : Exit.fail(credentialsRequired(scope, name, names, options.subject, "the replica that runs it refused the caller", missing, e.message))
        if (e.refusal === "too_many") return Exit.fail(perUserTooMany(name, e.max ?? 0))
        return Exit.fail(unavailable(actor, e.message))
      }
      return e instanceof McpRequestError ? Exit.fail(e) : Exit.die(e)
    }
  }
  const check = async (): Promise<Checked> => {
    let own
    try {
      own = takesValues ? await credentials.find(scope, name, principal) : { headers: {}, env: {} }
    } catch (e) {
      // Replica mode, Redis away: no credential can be read, so none is used (a deleted one never is).
      return unreadable("the per-user credential", e)
    }
    let authorized = true
    if (names.oauth) {
      // Read where it is shared (replica mode: Redis, bounded): an authorization finished, or deleted, on any replica counts at once.
      try {
        authorized = await credentials.authorizedNow(scope, name, principal)
      } catch (e) {
        return unreadable("the caller's OAuth authorization", e)
      }
      // A connection it kept (its tokens deleted on another replica) is closed too.
      if (!authorized) void credentials.reset(scope, name, principal, "its authorization is gone")
    }
    // The refusal says everything the caller lacks (a service with `headers` and `oauth` needs both).
    if (own === undefined && !authorized) return required("this caller has given neither its values nor its authorization", ["values", "authorization"])
    if (own === undefined) return notGiven()
    if (!authorized) return required("this caller has not authorized it (or its authorization was refused or deleted since)", ["authorization"])
    return Exit.succeed(own)
  }
  const checked = await (options.checks?.of(`${scopeLabel(scope)}\n${name}\n${principal}`, check) ?? check())
  if (Exit.isFailure(checked)) return Exit.failCause(checked.cause)
  const sent = await credentials.request({ scope, name, definition }, principal, checked.value, { remaining: options.remaining, hold: options.hold, signal: options.signal }, request)
  if (!names.oauth || Exit.isSuccess(sent)) return sent
  // The upstream refused the principal's token and no refresh mended it: only the principal can, by authorizing again.
  const failure = Cause.failureOption(sent.cause)
  if (Option.isSome(failure) && failure.value instanceof McpRequestError && failure.value.authorizationRequired) {
    void credentials.reset(scope, name, principal, "the upstream refused its authorization")
    return required("the upstream refused this caller's authorization", ["authorization"])
  }
  // Its tokens were deleted (or refused) while the request ran: the caller is told to authorize again.
  if (Option.isSome(failure) && !credentials.authorized(scope, name, principal)) return required("this caller's authorization was deleted during the request", ["authorization"])
  return sent
}

const unavailable = (actor: ServiceActorRef, why: string): ServiceUnavailable => {
  const snapshot = actor.getSnapshot()
  return new ServiceUnavailable({
    message: `Service '${snapshot.context.name}' cannot be used by this caller now: ${why}; try again shortly`,
    serviceName: snapshot.context.name,
    status: statusOf(snapshot),
    nextRetryAt: null,
    lastError: null
  })
}
