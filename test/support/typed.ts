/**
 * The typed HTTP client of tests, derived from the contract (`HttpApiClient.make(Api)`): a request is
 * checked against its endpoint's path, query and payload types when the tests type-check, and every
 * answer is decoded with the endpoint's response schema, so an answer that leaves the contract fails
 * the test that reads it. `typed((c) => c.store.health())` resolves with the decoded answer and
 * rejects with the contract's error (e.g. a NotFound instance); `typed.attempt` gives an Either.
 * Status-code and raw-body checks stay with the JSON client (client.ts). Loaded on first use
 * (`startTestServer`, `connectTyped`): it loads the whole
 * contract, which a test that starts no server does not need.
 */
import { FetchHttpClient, HttpApiClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { Effect, type Either } from "effect"
import { Api } from "../../src/http/Api.js"

const makeClient = (baseUrl: string, apiKey?: string) =>
  HttpApiClient.make(Api, {
    baseUrl,
    ...(apiKey === undefined ? {} : { transformClient: HttpClient.mapRequest(HttpClientRequest.bearerToken(apiKey)) })
  })

/** The contract's client: one property per group (`store`, `agent`, `monitoring`, ...), one method per endpoint. */
export type ApiClient = Effect.Effect.Success<ReturnType<typeof makeClient>>

/**
 * A typed call: `await typed((c) => c.store.listTools({ urlParams: {} }))` resolves with the decoded
 * answer (bounded by 40 s, so a hang fails the test, not the run) and rejects with the contract's error;
 * `typed.attempt(...)` resolves with an Either instead.
 */
export interface TypedApi {
  <A, E>(call: (client: ApiClient) => Effect.Effect<A, E>): Promise<A>
  attempt<A, E>(call: (client: ApiClient) => Effect.Effect<A, E>): Promise<Either.Either<A, E | Error>>
  readonly client: ApiClient
}

/** The typed client of a store's base URL, with `Authorization: Bearer <apiKey>` when given. */
export const typedApi = (baseUrl: string, apiKey?: string): TypedApi => {
  const client = Effect.runSync(makeClient(baseUrl, apiKey).pipe(Effect.provide(FetchHttpClient.layer)))
  const bounded = <A, E>(call: (client: ApiClient) => Effect.Effect<A, E>) =>
    call(client).pipe(Effect.timeoutFail({ duration: "40 seconds", onTimeout: () => new Error("typed API call: no answer within 40 s") }))
  const typed = <A, E>(call: (client: ApiClient) => Effect.Effect<A, E>): Promise<A> => Effect.runPromise(bounded(call))
  return Object.assign(typed, {
    client,
    attempt: <A, E>(call: (client: ApiClient) => Effect.Effect<A, E>) => Effect.runPromise(Effect.either(bounded(call)))
  })
}
