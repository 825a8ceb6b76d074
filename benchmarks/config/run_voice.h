// Whether this process speaks for the run: prints the notes that concern the whole run (such as
// --model-config's unused fields) once, not again from every rank. The app says so at start-up,
// before the options are read, since only it knows the hidden flags of ranks and companions.
#pragma once

namespace parbench {

// false in a rank of parbench's own launcher and in the profile companion.
void set_speaks_for_the_run(bool speaks);
// As set, and under an external launcher only on rank 0 (RANK unset or 0).
bool speaks_for_the_run();

}  // namespace parbench
