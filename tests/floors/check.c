/* The floor check's program: nothing to run. Each floor's library is linked into one of
 * these whole (every object of its archive, not only those main needs), beside only the
 * floors below it, so a call from a floor to a higher one, or to a peer it does not
 * declare, is an undefined reference and the build fails (see CMakeLists.txt). */
int main(void)
{
    return 0;
}
