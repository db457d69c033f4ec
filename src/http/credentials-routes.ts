/**
 * The per-user credentials routes, beyond the contract (README, Per-user credentials): `PUT` and
 * `DELETE .../credentials/{service_name}` for both scopes (`/for_store/...`: any admin key or token;
 * `/for_agent/{agent_id}/...`: that agent's key too; never a reader key, src/http/access.ts). The
 * principal gives (or forgets) its own credential, the one the request's key or token names:
 * write-only, never shown back. `POST .../credentials/{service_name}/authorize` (a `per_user.oauth`
 * service) starts or finishes the principal's own OAuth authorization of the upstream, as
 * authorize_service does the service's (src/runtime/upstream-oauth.ts); `DELETE` forgets its tokens too.
 * Kept apart from the shared payloads so these routes read in one place. A change goes through the
 * `Commands` service (`credentialsHandlers`, built once by each group).
 */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import { Effect, Schema } from "effect"
import { MAX_CREDENTIAL_BYTES, MAX_PRINCIPALS_PER_SERVICE } from "../config/credentials-file.js"
import { Forbidden, TooMany, ValidationError, type FieldProblem } from "../domain/errors.js"
import { AgentId, headerProblem, ServiceRef } from "../domain/schemas.js"
import { authorizeUpstream, type OAuthManager } from "../runtime/upstream-oauth.js"
import { AuthorizePayload, AuthorizeResponse } from "./payloads.js"
import { log } from "../logging/log.js"
import { perUserOf } from "../runtime/user-credentials.js"
import { credentialsRoute } from "../runtime/per-user-request.js"
import type { CommandOperations } from "../runtime/operations.js"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { callerWords, currentPrincipal } from "./access.js"
import { sessionOwner } from "./gateway/session-seal.js"
import { contract } from "./contract-errors.js"
import { BeyondContract, closed, ok } from "./payloads.js"
import type { ScopeRef } from "./scope-handlers.js"

const Values = (what: string) =>
  Schema.Record({ key: Schema.String, value: Schema.String }).annotations({
    message: () => ({ message: `must be an object of strings (${what} names to values)`, override: true }),
    description: `The principal's own ${what} values, by name (each name declared in the service's per_user.${what === "header" ? "headers" : "env"})`
  })

/** The principal's own values: `headers` for a remote service, `env` for a local one. */
export const CredentialsPayload = closed({
  headers: Schema.optional(Values("header")),
  env: Schema.optional(Values("env"))
})

export const CredentialsResponse = Schema.Struct({
  ...ok,
  service_name: Schema.String,
  headers: Schema.Array(Schema.String).annotations({ description: "The header names the principal has given (never their values)" }),
  env: Schema.Array(Schema.String).annotations({ description: "The environment names the principal has given (never their values)" })
})

/** The principal's own authorization: start it (nothing, or `redirect_uri`), or finish it with a pasted `code` and `state` (and `iss`). */
export const CredentialsAuthorizePayload = Schema.NullOr(
  closed({
    redirect_uri: AuthorizePayload.fields.redirect_uri,
    code: AuthorizePayload.fields.code,
    state: AuthorizePayload.fields.state,
    iss: AuthorizePayload.fields.iss
  })
)

/** What the principal has given and authorized for a service (names and dates only, never a value or a token). */
export const CredentialsStatusResponse = Schema.Struct({
  ...ok,
  service_name: Schema.String,
  headers: Schema.Array(Schema.String).annotations({ description: "The header names you have given (never their values)" }),
  env: Schema.Array(Schema.String).annotations({ description: "The environment names you have given (never their values)" }),
  oauth: Schema.Struct({
    required: Schema.Boolean.annotations({ description: "Whether the service takes each caller's own OAuth authorization (per_user.oauth)" }),
    authorized: Schema.Boolean.annotations({ description: "Whether you hold your own token of it" }),
    expires_at: Schema.NullOr(Schema.String).annotations({ description: "When your access token expires (it is refreshed before then); null when unknown or not authorized" })
  }),
  ready: Schema.Boolean.annotations({ description: "Whether your calls of the service's tools can go through: every declared value given, and authorized when it takes OAuth" })
})

export const CredentialsPath = Schema.Struct({ service_name: ServiceRef })
export const AgentCredentialsPath = Schema.Struct({ agent_id: AgentId, service_name: ServiceRef })

/** PUT and DELETE under a scope's prefix (`/for_store` or `/for_agent/:agent_id`). */
export const credentialsEndpoints = (prefix: string) => ({
  put: HttpApiEndpoint.put("putCredentials", `${prefix}/credentials/:service_name` as `/${string}`)
    .setPayload(CredentialsPayload)
    .addSuccess(CredentialsResponse)
    .annotate(BeyondContract, true),
  del: HttpApiEndpoint.del("deleteCredentials", `${prefix}/credentials/:service_name` as `/${string}`)
    .addSuccess(CredentialsResponse)
    .annotate(BeyondContract, true),
  get: HttpApiEndpoint.get("getCredentials", `${prefix}/credentials/:service_name` as `/${string}`)
    .addSuccess(CredentialsStatusResponse)
    .annotate(BeyondContract, true),
  authorize: HttpApiEndpoint.post("authorizeCredentials", `${prefix}/credentials/:service_name/authorize` as `/${string}`)
    .setPayload(CredentialsAuthorizePayload)
    .addSuccess(AuthorizeResponse)
    .annotate(BeyondContract, true)
})

/** The problems of a credential for a service's `per_user` names: every declared name given, nothing else. */
const credentialProblems = (declared: { readonly headers: ReadonlyArray<string>; readonly env: ReadonlyArray<string> }, given: Schema.Schema.Type<typeof CredentialsPayload>): Array<FieldProblem> => {
  const problems: Array<FieldProblem> = []
  const check = (field: "headers" | "env", names: ReadonlyArray<string>, values: Readonly<Record<string, string>> | undefined, caseless: boolean) => {
    const fold = (n: string) => (caseless ? n.toLowerCase() : n)
    const wanted = new Set(names.map(fold))
    const have = new Set(Object.keys(values ?? {}).map(fold))
    for (const [name, value] of Object.entries(values ?? {})) {
      if (!wanted.has(fold(name))) problems.push({ field: `${field}.${name}`, problem: `is not declared in the service's per_user.${field}` })
      else if (value === "") problems.push({ field: `${field}.${name}`, problem: "must not be empty" })
      else if (field === "headers" && headerProblem(name, value) !== undefined) problems.push({ field: `${field}.${name}`, problem: headerProblem(name, value) as string })
      else if (field === "env" && value.includes("\0")) problems.push({ field: `${field}.${name}`, problem: "must not contain NUL" })
    }
    for (const name of names) if (!have.has(fold(name))) problems.push({ field: `${field}.${name}`, problem: "is required (declared in the service's per_user)" })
  }
  check("headers", declared.headers, given.headers, true)
  check("env", declared.env, given.env, false)
  if (problems.length === 0 && Buffer.byteLength(JSON.stringify(given)) > MAX_CREDENTIAL_BYTES) problems.push({ field: "body", problem: `must be at most ${MAX_CREDENTIAL_BYTES} bytes` })
  return problems
}

/** The handlers of both scopes: the credential is the request's own principal's (its key or token), never another's. */
/**
 * What every credentials route starts from: the scope, the request's own principal (the caller's key
 * or token subject as a digest, the same every face computes), the `per_user` service named (400 when
 * it is not one) and the store's credentials.
 */
const ownCredentials = (scope: ScopeRef, serviceName: string) =>
  Effect.gen(function* () {
    const ctx = yield* scope
    const who = yield* currentPrincipal
    const request = yield* HttpServerRequest.HttpServerRequest
    const principal = sessionOwner(who, request.headers["authorization"])
    const actor = yield* ctx.service(serviceName)
    const { name, definition } = actor.getSnapshot().context
    const declared = perUserOf(definition)
    if (declared === undefined) {
      return yield* Effect.fail(ValidationError.of([{ field: "service_name", problem: `service '${name}' does not take per-user credentials (its definition has no per_user)` }]))
    }
    const credentials = ctx.host.credentials
    if (credentials === undefined) return yield* Effect.fail(new Forbidden({ message: "This store keeps no per-user credentials" }))
    return { ctx, who, principal, name, declared, credentials }
  })

/**
 * `POST .../credentials/{service_name}/authorize`: the request's own principal authorizes a
 * `per_user.oauth` service's upstream for itself; the answer is the URL to open (its state bound to
 * this principal, this scope and this service), or `authorized` once a pasted code and state of its
 * own are taken. A state another principal started is refused and left as it was.
 */
export const authorizeCredentialsAnswer = (scope: ScopeRef, oauth: OAuthManager, serviceName: string, given: Schema.Schema.Type<typeof CredentialsAuthorizePayload>) =>
  contract(
    Effect.gen(function* () {
      const ctx = yield* scope
      const who = yield* currentPrincipal
      const request = yield* HttpServerRequest.HttpServerRequest
      const principal = sessionOwner(who, request.headers["authorization"])
      if (ctx.host.credentials === undefined) return yield* Effect.fail(new Forbidden({ message: "This store keeps no per-user credentials" }))
      const result = yield* authorizeUpstream(ctx, oauth, { service_name: serviceName, ...given }, principal, callerWords(who))
      if (result.state === "authorized") {
        // A connection opened before (with a token since refused) is not kept: the next call opens one with the new token.
        yield* Effect.promise(() => ctx.host.credentials?.reset(ctx.scope, result.service_name, principal, "its authorization changed") ?? Promise.resolve())
      }
      log.info(`${result.state === "authorized" ? "finished" : "started"} the OAuth authorization of ${callerWords(who)} for service '${result.service_name}'`, {
        event: result.state === "authorized" ? "credentials_authorized" : "credentials_authorizing",
        scope: ctx.label,
        service: result.service_name
      })
      return {
        success: true,
        message: result.authorization_url !== undefined ? `Open the authorization URL to authorize '${result.service_name}' for yourself` : `You authorized '${result.service_name}': your calls of its tools carry your own token`,
        ...result
      }
    })
  )

/**
 * The credentials routes' handlers on the changes of the operations (`Commands`, the one way a
 * change is written), built once when a group is built.
 */
export const credentialsHandlers = (commands: CommandOperations) => {
  /**
   * A change of a credential: replica mode, Redis away or hung, it is refused `ClusterUnavailable`
   * (503 `cluster_unavailable`) within the change's budget and never applied later
   * (src/config/redis-credentials.ts); a log line says so.
   */
  const change = <A>(task: () => Promise<A>) =>
    Effect.tapError(commands.definitionsChange(task), (e) => Effect.sync(() => log.warn(`a per-user credential change was refused: ${e.message}`, { event: "credentials_refused" })))

  const credentialsAnswer = (scope: ScopeRef, serviceName: string, given: Schema.Schema.Type<typeof CredentialsPayload> | undefined) =>
    contract(
      Effect.gen(function* () {
        const { ctx, who, principal, name, declared, credentials } = yield* ownCredentials(scope, serviceName)
        const words = callerWords(who)
        const where = { event: "", scope: ctx.label, service: name }
        if (given === undefined) {
          // Its values and its own OAuth tokens (per_user.oauth) alike.
          const removed = yield* change(() => credentials.remove(ctx.scope, name, principal))
          log.info(`${removed ? "deleted" : "found no"} per-user credential of ${words} for service '${name}'`, { ...where, event: "credentials_deleted" })
          return { success: true, message: removed ? `Your credential for '${name}' was deleted` : `You had no credential for '${name}'`, service_name: name, headers: [], env: [] }
        }
        if (declared.headers.length === 0 && declared.env.length === 0) {
          const route = credentialsRoute(ctx.scope, name, true)
          log.warn(`refused a per-user credential for service '${name}': it takes an OAuth authorization only`, { ...where, event: "credentials_refused" })
          return yield* Effect.fail(ValidationError.of([{ field: "body", problem: `service '${name}' takes no header or environment values, only each caller's own OAuth authorization: ${route}` }]))
        }
        const problems = credentialProblems(declared, given)
        if (problems.length > 0) {
          log.warn(`refused a per-user credential for service '${name}': ${problems.map((p) => `${p.field} ${p.problem}`).join("; ")}`, { ...where, event: "credentials_refused" })
          return yield* Effect.fail(ValidationError.of(problems))
        }
        const credential = { headers: { ...given.headers }, env: { ...given.env } }
        const kept = yield* change(() => credentials.set(ctx.scope, name, principal, credential))
        if (!kept) {
          log.warn(`refused a per-user credential for service '${name}': it has the most principals`, { ...where, event: "credentials_refused" })
          return yield* Effect.fail(new TooMany({ message: `Service '${name}' has credentials of the most principals it may keep`, limit: "per_user_principals", max: MAX_PRINCIPALS_PER_SERVICE, retryAfterSeconds: 60 }))
        }
        log.info(`kept the per-user credential of ${words} for service '${name}'`, { ...where, event: "credentials_set" })
        return { success: true, message: `Your credential for '${name}' is kept; your calls of its tools use it`, service_name: name, headers: Object.keys(credential.headers), env: Object.keys(credential.env) }
      })
    )

  /**
   * `GET .../credentials/{service_name}`: what the request's own principal has given (names) and
   * whether it has authorized the upstream for itself (`per_user.oauth`), never a value or a token;
   * `ready` tells whether its calls can go through. Nothing of another principal's is read.
   */
  const credentialsStatusAnswer = (scope: ScopeRef, oauth: OAuthManager, serviceName: string) =>
    contract(
      Effect.gen(function* () {
        const { ctx, principal, name, declared, credentials } = yield* ownCredentials(scope, serviceName)
        // Replica mode, Redis away: 503 cluster_unavailable, as a change would be.
        const given = yield* commands.definitionsChange(() => credentials.find(ctx.scope, name, principal))
        // Replica mode: the principal's OAuth entry is read from Redis too (an authorization finished or deleted on another replica shows at once).
        if (declared.oauth) yield* commands.definitionsChange(() => oauth.readPrincipal(ctx.scope, name, principal))
        const status = declared.oauth ? oauth.principalStatus(ctx.scope, name, principal) : { authorized: false, expires_at: null }
        const valuesGiven = (declared.headers.length === 0 && declared.env.length === 0) || given !== undefined
        const ready = valuesGiven && (!declared.oauth || status.authorized)
        return {
          success: true,
          message: ready ? `Your calls of '${name}' carry your own credentials` : `Your calls of '${name}' are refused until you ${valuesGiven ? "authorize it for yourself (POST .../authorize)" : "give your values (PUT)"}`,
          service_name: name,
          headers: Object.keys(given?.headers ?? {}),
          env: Object.keys(given?.env ?? {}),
          oauth: { required: declared.oauth, ...status },
          ready
        }
      })
    )

  return { credentialsAnswer, authorizeCredentialsAnswer, credentialsStatusAnswer }
}
