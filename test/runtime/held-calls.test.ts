// HeldCalls without a store (the faces' tests run it end to end): a replica's states are sealed and
// name their holder; a tool call's retry that names another replica is carried there, a read's or a
// prompt's is refused saying so, and a state with a broken seal names no call.
import { Exit } from "effect"
import { describe, expect, it, onTestFinished } from "vitest"
import { ValidationError } from "../../src/domain/errors.js"
import { HeldCalls, type AnyExit, type HeldCallsReplica, type HeldRun, type HeldStep } from "../../src/runtime/input-required.js"

const SECRET = "a cluster secret"

/** A replica's held calls, closed when the test ends; `carried` lists the retries it carried elsewhere (to holder, subject). */
const replica = (id: string) => {
  const carried: string[] = []
  const hooks: HeldCallsReplica = {
    replicaId: id,
    secret: SECRET,
    carry: async (holder, _retry, owner) => {
      carried.push(`${holder} ${owner.subject}`)
      return { _tag: "Ended", exit: Exit.succeed("carried") }
    }
  }
  const held = new HeldCalls(10, hooks)
  onTestFinished(() => held.close())
  return { held, carried }
}

/** An operation whose upstream asks once (an elicitation), then ends with what it was answered (or dies, cancelled). */
const asking: HeldRun<Exit.Exit<unknown, never>> = ({ relay }, signal) =>
  relay({ method: "elicitation/create", params: { message: "ok?" } }, { signal, timeoutMs: 5_000 }).then(Exit.succeed, Exit.die)

const started = async (held: HeldCalls, subject: string): Promise<string> => {
  const step = (await held.turn(asking, { scope: "store", owner: "key", subject, keyed: true }, { signal: new AbortController().signal })) as HeldStep<AnyExit>
  if (step._tag !== "InputRequired") throw new Error("expected input_required")
  return step.state
}

describe("held calls across replicas", () => {
  it("a tool call's retry that names another replica is carried there; the holder answers it itself", async () => {
    const a = replica("replica-a")
    const b = replica("replica-b")
    const state = await started(a.held, "tools/call svc__ask")
    expect(state).toMatch(/^h2\./)
    const owner = { scope: "store", owner: "key", subject: "tools/call svc__ask", keyed: true }
    const retry = { state, responses: { input_1: { action: "accept", content: {} } } }
    const elsewhere = await b.held.turn(asking, owner, { retry, signal: new AbortController().signal })
    expect(b.carried).toEqual(["replica-a tools/call svc__ask"])
    expect(elsewhere).toEqual({ _tag: "Ended", exit: Exit.succeed("carried") })
    const here = (await a.held.turn(asking, owner, { retry, signal: new AbortController().signal })) as HeldStep<AnyExit>
    expect(here._tag).toBe("Ended")
    expect(a.carried).toEqual([])
  })

  it("a held read's or prompt's retry on another replica is refused, saying only tool calls are carried", async () => {
    const a = replica("replica-a")
    const b = replica("replica-b")
    for (const subject of ["resources/read mem://locked", "prompts/get greet"]) {
      const state = await started(a.held, subject)
      const refused = await b.held.turn(asking, { scope: "store", owner: "key", subject, keyed: true }, { retry: { state, responses: {} }, signal: new AbortController().signal })
      expect(refused).toBeInstanceOf(ValidationError)
      expect((refused as ValidationError).problems[0]?.problem).toMatch(/only tool calls are carried/)
    }
    expect(b.carried).toEqual([])
  })

  it("a state whose seal does not hold (another secret, or edited) names no call, and nothing is carried", async () => {
    const a = replica("replica-a")
    const b = replica("replica-b")
    const state = await started(a.held, "tools/call svc__ask")
    const [prefix, holder, random, seal] = state.split(".")
    const forged = [prefix, Buffer.from("replica-c").toString("base64url"), random, seal].join(".")
    // Edited: one character of the seal changed (to another one, whatever it was).
    const edited = `${state.slice(0, -3)}${state.at(-3) === "A" ? "B" : "A"}${state.slice(-2)}`
    for (const bad of [forged, edited, `h2.${holder}`]) {
      const refused = await b.held.turn(asking, { scope: "store", owner: "key", subject: "tools/call svc__ask", keyed: true }, { retry: { state: bad, responses: {} }, signal: new AbortController().signal })
      expect(refused, bad).toBeInstanceOf(ValidationError)
      expect((refused as ValidationError).problems[0]?.problem).toMatch(/names no call/)
    }
    expect(b.carried).toEqual([])
  })
})
