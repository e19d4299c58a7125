"""
The rules of a high-availability pair, apart from the runtime that
carries them out.

Named for what it is: HA's rules.  L{meshroute.ha} is the pair's runtime
(the instance, its connections, replication over C{store.db}), which
sits above the router core; these rules sit below the store, so that the
store can persist a voter's record and every router's witness (in the
router core) can apply the voting rules, without either importing the
pair's runtime.  Nothing here touches the reactor, the store, a link or
a router: a machine takes its clock as an injected C{IReactorTime}, and
its outputs are calls on an interface its caller implements.

 - L{quorum}: the voting rules (positions, a voter's durable record and
   what it grants, the candidate's tally, the start-up rule);
 - L{election}: the candidate's election, as a machine;
 - L{lease}: the active's lease, as a rule and a machine;
 - L{role}: the role of one instance, as a machine;
 - L{settings}: C{[ha]}'s settings and the rules that judge them.
"""
